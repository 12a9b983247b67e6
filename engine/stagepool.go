package engine

import (
	"context"
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/datapath/tcp"
)

// tcpChunk is the size of a staging buffer (rdma.go's rdmaChunk).
const tcpChunk = tcp.Chunk

// stagePool (left for the engine's RDMA staging, until RDMA moves to
// internal/datapath, whose staging.Pool replaces it) hands out host
// staging buffers of tcpChunk bytes, allocated
// on first use and kept until the engine closes. get blocks while all are
// in use: that is the back-pressure of a peer sending faster than the
// device takes the bytes.
type stagePool struct {
	e    *Engine
	free chan *Buffer
	made atomic.Int32
	max  int32
}

func newStagePool(e *Engine, n int) *stagePool {
	return &stagePool{e: e, free: make(chan *Buffer, n), max: int32(n)}
}

// get returns a staging buffer, waiting for one until done is closed
// (ErrClosed) or ctx ends (ErrCanceled or ErrTimeout).
func (p *stagePool) get(ctx context.Context, done <-chan struct{}) (*Buffer, error) {
	select {
	case b := <-p.free:
		return b, nil
	default:
	}
	for {
		m := p.made.Load()
		if m >= p.max {
			break
		}
		if p.made.CompareAndSwap(m, m+1) {
			b, err := p.e.Alloc(tcpChunk, Host)
			if err != nil {
				p.made.Add(-1)
				return nil, err
			}
			return b, nil
		}
	}
	select {
	case b := <-p.free:
		return b, nil
	case <-done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctxErr("waiting for a staging buffer", ctx.Err())
	}
}

// tryGet is get without waiting (nil when none is free).
func (p *stagePool) tryGet() *Buffer {
	select {
	case b := <-p.free:
		return b
	default:
	}
	if m := p.made.Load(); m < p.max && p.made.CompareAndSwap(m, m+1) {
		b, err := p.e.Alloc(tcpChunk, Host)
		if err != nil {
			p.made.Add(-1)
			return nil
		}
		return b
	}
	return nil
}

func (p *stagePool) put(b *Buffer) { p.free <- b }
