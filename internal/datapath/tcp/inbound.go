package tcp

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/wire"
)

// inbound is a transfer whose bytes arrive on the connection: a peer's Put
// into our memory, or the answer to one of our Gets. The reader lands the
// bytes; it finishes (onDone, once) when every byte has landed and every
// staging DMA is complete, or when it was canceled and nothing is in
// flight any more.
type inbound struct {
	id      uint64
	dst     datapath.Mem // zero for a transfer whose bytes are dropped
	discard bool
	n       uint64

	mu       sync.Mutex
	got      uint64
	routing  bool // the reader is reading bytes into dst
	dmas     int  // staging DMAs in flight
	canceled bool
	quiet    bool // canceled by the peer (wire.Cancel): no reply
	done     bool
	err      error
	final    error // err when done was set: what onDone gets (err may still be written after, by a late cancel)
	onDone   func(error)
}

// finishLocked reports whether the transfer just finished (the caller
// then calls onDone with err, outside the lock).
func (in *inbound) finishLocked() bool {
	if in.done || in.routing || in.dmas > 0 || (in.got < in.n && !in.canceled) {
		return false
	}
	in.done = true
	in.final = in.err
	return true
}

func (in *inbound) cancel(err error) {
	in.mu.Lock()
	in.canceled = true
	if in.err == nil {
		in.err = err
	}
	fin := in.finishLocked()
	in.mu.Unlock()
	if fin {
		in.onDone(in.final)
	}
}

// routed is what the reader's sink chose for the Data frame being read.
type routed struct {
	in    *inbound
	off   uint64
	n     uint64
	stage datapath.Buf
}

// route is the reader's DataSink.
func (p *path) route(id, off uint64, n int) ([]byte, error) {
	p.cur = routed{}
	p.mu.Lock()
	in := p.inbound[id]
	p.mu.Unlock()
	if in == nil {
		if p.issued(id) {
			return nil, nil // a Get we gave up on: drop the bytes
		}
		return nil, fmt.Errorf("%w: data for request %d, which is not in progress", wire.ErrMalformed, id)
	}
	in.mu.Lock()
	if off != in.got || uint64(n) > in.n-in.got {
		in.mu.Unlock()
		return nil, fmt.Errorf("%w: request %d: data at [%d, +%d) out of order or beyond its %d bytes (%d landed)", wire.ErrMalformed, id, off, n, in.n, in.got)
	}
	if in.discard || in.canceled {
		in.got += uint64(n)
		full := in.got == in.n
		in.mu.Unlock()
		if full && in.discard {
			p.removeInbound(id)
		}
		return nil, nil
	}
	in.routing = true
	in.mu.Unlock()
	p.cur = routed{in: in, off: off, n: uint64(n)}
	if !in.dst.IsGaudi() {
		return in.dst.Host()[off : off+uint64(n)], nil
	}
	stage, err := p.t.in.Get(context.Background(), p.c.Done())
	if err != nil {
		return nil, err
	}
	p.cur.stage = stage
	return stage.HostBytes()[:n], nil
}

// Landed finishes the Data frame route chose, once its bytes are read.
func (p *path) Landed() {
	cur := p.cur
	p.cur = routed{}
	in := cur.in
	if in == nil {
		return
	}
	p.bytesIn.Add(cur.n)
	in.mu.Lock()
	in.routing = false
	in.got += cur.n
	dma := cur.stage != nil && !in.canceled
	if dma {
		in.dmas++
	}
	full := in.got == in.n
	fin := in.finishLocked()
	in.mu.Unlock()
	if full {
		p.removeInbound(in.id)
	}
	if cur.stage != nil && !dma {
		p.t.in.Put(cur.stage)
	}
	if dma {
		w := p.env.DMA(in.dst.Sub(cur.off, cur.n), datapath.Mem{B: cur.stage, Len: cur.n}, time.Time{})
		p.env.Go(func() {
			<-w.Done()
			p.t.in.Put(cur.stage)
			in.mu.Lock()
			in.dmas--
			if err := w.Err(); err != nil && in.err == nil {
				in.err = err
			}
			fin := in.finishLocked()
			in.mu.Unlock()
			if fin {
				in.onDone(in.final)
			}
		})
	}
	if fin {
		in.onDone(in.final)
	}
}

// abortRouting undoes a route whose read failed (the connection broke).
func (p *path) abortRouting() {
	cur := p.cur
	p.cur = routed{}
	if cur.stage != nil {
		p.t.in.Put(cur.stage)
	}
	if in := cur.in; in != nil {
		// A transfer canceled while its bytes were being read (its reply
		// part failed: the endpoint's failure, a timeout) was left to
		// this route to finish, and is no longer in p.inbound for
		// cancelInbound to find: finish it here, or it never resolves.
		in.mu.Lock()
		in.routing = false
		fin := in.finishLocked()
		in.mu.Unlock()
		if fin {
			in.onDone(in.final)
		}
	}
}
