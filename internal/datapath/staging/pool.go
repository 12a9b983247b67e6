// Package staging holds what the TCP and RDMA data paths share to move
// Gaudi memory through host memory: a pool of host staging buffers, and
// the pipelines that overlap the device DMA of one chunk with the network
// transfer of another.
package staging

import (
	"context"
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// Pool hands out host staging buffers of Size bytes, allocated on first
// use (up to Max) and kept until Close. Get blocks while all are in use:
// that is the back-pressure of a sender faster than the device. It also
// blocks, rather than fail, when another buffer cannot be made while some
// are in use (they come back).
type Pool struct {
	env  datapath.Env
	size uint64
	free chan datapath.Buf
	made atomic.Int32 // buffers made or being made (at most max)
	have atomic.Int32 // buffers made
	max  int32
	// failed is closed (and replaced) when an allocation fails: a Get
	// waiting because every slot was being made may have nothing left
	// to wait for, and tries again.
	failed atomic.Pointer[chan struct{}]
}

// NewPool makes a pool of up to n buffers of size bytes.
func NewPool(env datapath.Env, n int, size uint64) *Pool {
	p := &Pool{env: env, size: size, free: make(chan datapath.Buf, n), max: int32(n)}
	ch := make(chan struct{})
	p.failed.Store(&ch)
	return p
}

// Size is the bytes of each buffer.
func (p *Pool) Size() uint64 { return p.size }

// Get returns a staging buffer, waiting for one until done is closed
// (gxerr.Closed) or ctx ends (gxerr.Canceled or gxerr.Timeout). It fails
// with the allocation's error only when no buffer was ever made (none
// can come back to wait for).
func (p *Pool) Get(ctx context.Context, done <-chan struct{}) (datapath.Buf, error) {
	for try := true; ; {
		// Taken before trying, so that a failure after the try is seen.
		failed := *p.failed.Load()
		if try {
			b, err := p.tryGet()
			if b != nil {
				return b, nil
			}
			if err != nil && p.have.Load() == 0 {
				return nil, err
			}
		}
		select {
		case b := <-p.free:
			return b, nil
		case <-failed:
			// Another Get's allocation failed. With no buffer made,
			// none can come back: try again (and fail, or make one).
			// With some, wait for them: trying would only fail again
			// and wake the other waiters in turn.
			try = p.have.Load() == 0
		case <-done:
			return nil, gxerr.Closed
		case <-ctx.Done():
			return nil, gxerr.Ctx("waiting for a staging buffer", ctx.Err())
		}
	}
}

// TryGet is Get without waiting (nil when none is free and no more may
// be made, or the allocation failed).
func (p *Pool) TryGet() datapath.Buf {
	b, _ := p.tryGet()
	return b
}

func (p *Pool) tryGet() (datapath.Buf, error) {
	select {
	case b := <-p.free:
		return b, nil
	default:
	}
	for {
		m := p.made.Load()
		if m >= p.max {
			return nil, nil
		}
		if p.made.CompareAndSwap(m, m+1) {
			b, err := p.env.AllocHost(p.size)
			if err != nil {
				p.made.Add(-1)
				ch := make(chan struct{})
				close(*p.failed.Swap(&ch)) // wake the Gets waiting on this slot
				return nil, err
			}
			p.have.Add(1)
			return b, nil
		}
	}
}

// Ready is the channel of free buffers: a receive from it takes one (for
// a caller that waits for a buffer from this pool or something else). It
// yields only buffers made before, so call it after TryGet found none.
func (p *Pool) Ready() <-chan datapath.Buf { return p.free }

// Put returns a buffer to the pool.
func (p *Pool) Put(b datapath.Buf) { p.free <- b }

// Close frees the buffers in the pool (call once every buffer is back).
func (p *Pool) Close() error {
	var first error
	for {
		select {
		case b := <-p.free:
			if err := p.env.FreeHost(b); err != nil && first == nil {
				first = err
			}
		default:
			return first
		}
	}
}
