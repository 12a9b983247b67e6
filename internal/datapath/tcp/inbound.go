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
	// segs (a list transfer: dst unused) are the entries the n bytes
	// land in, one after the other; no Data frame straddles two.
	segs []seg
	si   int // reader only: the entry the next frame lands in

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

// seg is an entry of a list transfer: its bytes end at end in the
// stream (they start where the previous entry's end); drop: they are
// read and dropped (an entry the owner refused).
type seg struct {
	end  uint64
	dst  datapath.Mem
	drop bool
}

// target is where the n bytes at off of in's stream go (in.mu held):
// drop says they are read and dropped (a refused entry of a list).
func (in *inbound) target(off, n uint64) (dst datapath.Mem, drop bool, err error) {
	if in.segs == nil {
		return in.dst.Sub(off, n), false, nil
	}
	for in.si < len(in.segs) && off >= in.segs[in.si].end {
		in.si++
	}
	if in.si == len(in.segs) || off+n > in.segs[in.si].end {
		return dst, false, fmt.Errorf("%w: request %d: data at [%d, +%d) straddles two entries of the list", wire.ErrMalformed, in.id, off, n)
	}
	s := in.segs[in.si]
	if s.drop {
		return dst, true, nil
	}
	start := uint64(0)
	if in.si > 0 {
		start = in.segs[in.si-1].end
	}
	return s.dst.Sub(off-start, n), false, nil
}

// routed is what the reader's sink chose for the Data frame being read.
type routed struct {
	in    *inbound
	dst   datapath.Mem // where the bytes go (staged for Gaudi memory)
	n     uint64
	drop  bool // bytes of a refused entry, read and dropped
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
	dst, drop, err := in.target(off, uint64(n))
	if err != nil {
		in.mu.Unlock()
		return nil, err
	}
	in.routing = true
	in.mu.Unlock()
	p.cur = routed{in: in, dst: dst, n: uint64(n), drop: drop}
	if drop {
		return nil, nil
	}
	if !dst.IsGaudi() {
		return dst.Host(), nil
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
	if !cur.drop {
		p.bytesIn.Add(cur.n)
	}
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
		w := p.env.DMA(cur.dst, datapath.Mem{B: cur.stage, Len: cur.n}, time.Time{})
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
