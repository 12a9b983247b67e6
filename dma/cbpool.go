package dma

import (
	"errors"
	"sync"
)

// CBPool keeps command buffers of one size for reuse by CSs (a CB is
// costly to make: Gaudi1 CB CREATE + mmap, Gaudi2/3 host pages mapped
// into the device MMU). Get hands out a pooled CB, emptied, or a new one;
// Put takes one back once its CS has retired. It is safe for concurrent
// use.
type CBPool struct {
	d    *Device
	size int
	max  int

	mu     sync.Mutex
	free   []*CB
	closed bool
}

// NewCBPool returns a pool of command buffers of size bytes that keeps at
// most max of them (Put closes the others).
func (d *Device) NewCBPool(size, max int) *CBPool {
	return &CBPool{d: d, size: size, max: max}
}

// Get returns an empty command buffer of the pool's size: a pooled one,
// or a new one (Device.NewCB). Once the Device is closed (which releases
// the pooled CBs) it fails with ErrClosed.
func (p *CBPool) Get() (*CB, error) {
	for {
		p.mu.Lock()
		n := len(p.free)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		cb := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		if cb.enter("reset") != nil {
			continue // released (Device.Close, or closed behind the pool's back)
		}
		cb.reset()
		cb.leave()
		return cb, nil
	}
	return p.d.NewCB(p.size)
}

// Put gives back a command buffer from Get that no CS uses any more. It
// is closed instead of kept when the pool is full or closed, or when it
// belongs to another device; a CB already released (CB.Close,
// Device.Close) is dropped.
func (p *CBPool) Put(cb *CB) {
	if cb == nil {
		return
	}
	if cb.d != p.d || cb.released() {
		_ = cb.Close()
		return
	}
	p.mu.Lock()
	if p.closed || len(p.free) >= p.max {
		p.mu.Unlock()
		_ = cb.Close()
		return
	}
	p.free = append(p.free, cb)
	p.mu.Unlock()
}

// Len is the number of command buffers the pool holds.
func (p *CBPool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Close closes the pooled command buffers; later Puts close theirs.
// Idempotent.
func (p *CBPool) Close() error {
	p.mu.Lock()
	free := p.free
	p.free, p.closed = nil, true
	p.mu.Unlock()
	var errs []error
	for _, cb := range free {
		errs = append(errs, cb.Close())
	}
	return errors.Join(errs...)
}
