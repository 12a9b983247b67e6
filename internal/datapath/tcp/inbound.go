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
	// land in, one after the other (a frame may span several).
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
	// onDone is told once when the transfer finishes: the op whose Get
	// it answers, or the inbound itself for a served Put (putLanded),
	// neither an allocation as a method value would be.
	onDone inboundDone

	// A served Put's (putLanded): its path and its reply, kept here so
	// that serving a Put allocates no closure and no message for them.
	p    *path
	comp wire.Completion
}

// inboundDone is what an inbound transfer tells when it finishes: err is
// its outcome (nil: every byte landed).
type inboundDone interface{ inboundDone(err error) }

// doneFunc is an inboundDone that calls the function.
type doneFunc func(error)

func (f doneFunc) inboundDone(err error) { f(err) }

// discardDone is the inboundDone of a refused Put's bytes: nothing to do.
type discardDone struct{}

func (discardDone) inboundDone(error) {}

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
		in.onDone.inboundDone(in.final)
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

// piece is where part of a Data frame goes: dst (drop: nowhere, the
// bytes of a refused entry), from byte at of the frame.
type piece struct {
	dst  datapath.Mem
	at   uint64
	drop bool
}

// target appends to into where the n bytes at off of in's stream go
// (in.mu held; off and n are within the stream): one piece, or one per
// entry of a list the bytes span.
func (in *inbound) target(off, n uint64, into []piece) []piece {
	if in.segs == nil {
		return append(into, piece{dst: in.dst.Sub(off, n)})
	}
	for at := uint64(0); at < n; {
		for off >= in.segs[in.si].end { // (empty entries, entries done)
			in.si++
		}
		s := in.segs[in.si]
		start := uint64(0)
		if in.si > 0 {
			start = in.segs[in.si-1].end
		}
		k := min(n-at, s.end-off)
		if s.drop {
			into = append(into, piece{at: at, drop: true, dst: datapath.Mem{Len: k}})
		} else {
			into = append(into, piece{at: at, dst: s.dst.Sub(off-start, k)})
		}
		at += k
		off += k
	}
	return into
}

// routed is what the reader's sink chose for the Data frame being read.
type routed struct {
	in     *inbound
	n      uint64
	pieces []piece
	stage  datapath.Buf // where the bytes for Gaudi memory land first
}

// route is the reader's DataSink (a frame landing in one place).
func (p *path) route(id, off uint64, n int) ([]byte, error) {
	v, err := p.routeV(id, off, n, nil)
	if err != nil || v == nil {
		return nil, err
	}
	if len(v) == 1 {
		return v[0], nil
	}
	return nil, fmt.Errorf("%w: request %d: a frame for several places", wire.ErrMalformed, id)
}

// routeV is the reader's wire.DataSinkV: a frame of a list may carry
// bytes of several entries.
func (p *path) routeV(id, off uint64, n int, into [][]byte) ([][]byte, error) {
	p.cur = routed{pieces: p.cur.pieces[:0]}
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
	pieces := in.target(off, uint64(n), p.cur.pieces)
	in.routing = true
	in.mu.Unlock()
	p.cur.in, p.cur.n, p.cur.pieces = in, uint64(n), pieces
	if len(pieces) == 1 && pieces[0].drop {
		return nil, nil
	}
	for _, pc := range pieces {
		switch {
		case pc.drop:
			into = p.scratch(into, pc.dst.Len)
		case pc.dst.IsGaudi():
			if p.cur.stage == nil {
				stage, err := p.in.Get(context.Background(), p.c.Done())
				if err != nil {
					return nil, err
				}
				p.cur.stage = stage
			}
			// gxfer sends at most Chunk, a staging buffer, per frame; a
			// frame may be larger (wire.MaxDataPayload), but not into
			// Gaudi memory, which it reaches through one buffer.
			hb := p.cur.stage.HostBytes()
			if pc.at+pc.dst.Len > uint64(len(hb)) {
				return nil, fmt.Errorf("%w: request %d: a %d-byte Data frame into Gaudi memory (at most %d)", wire.ErrMalformed, id, n, len(hb))
			}
			into = append(into, hb[pc.at:pc.at+pc.dst.Len])
		default:
			into = append(into, pc.dst.Host())
		}
	}
	return into, nil
}

// scratchMax is the size of the reader's scratch buffer.
const scratchMax = 64 << 10

// scratch appends to into the places for n bytes the reader drops (a
// refused entry's, in a frame with others'): its one scratch buffer, as
// many times as it takes. The bytes go nowhere, so the places may be the
// same memory; a buffer of the bytes' size would let any peer make each
// of its connections hold one as large as a frame.
func (p *path) scratch(into [][]byte, n uint64) [][]byte {
	if p.drop == nil {
		p.drop = make([]byte, scratchMax)
	}
	for n > 0 {
		k := min(n, scratchMax)
		into = append(into, p.drop[:k])
		n -= k
	}
	return into
}

// Landed finishes the Data frame route chose, once its bytes are read.
func (p *path) Landed() {
	cur := p.cur
	p.cur = routed{pieces: cur.pieces[:0]}
	in := cur.in
	if in == nil {
		return
	}
	var dmas []piece
	for _, pc := range cur.pieces {
		if !pc.drop {
			p.bytesIn.Add(pc.dst.Len)
			if pc.dst.IsGaudi() {
				dmas = append(dmas, pc)
			}
		}
	}
	in.mu.Lock()
	in.routing = false
	in.got += cur.n
	dma := len(dmas) > 0 && !in.canceled
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
		p.in.Put(cur.stage)
	}
	if dma {
		p.staging.Add(1)
		ws := make([]datapath.Waiter, len(dmas))
		for i, pc := range dmas {
			ws[i] = p.env.DMA(pc.dst, datapath.Mem{B: cur.stage, Off: pc.at, Len: pc.dst.Len}, time.Time{})
		}
		p.env.Go(func() {
			var err error
			for _, w := range ws {
				<-w.Done()
				if e := w.Err(); e != nil && err == nil {
					err = e
				}
			}
			p.in.Put(cur.stage)
			p.staging.Add(-1)
			in.mu.Lock()
			in.dmas--
			if err != nil && in.err == nil {
				in.err = err
			}
			fin := in.finishLocked()
			in.mu.Unlock()
			if fin {
				in.onDone.inboundDone(in.final)
			}
		})
	}
	if fin {
		in.onDone.inboundDone(in.final)
	}
}

// abortRouting undoes a route whose read failed (the connection broke).
func (p *path) abortRouting() {
	cur := p.cur
	p.cur = routed{pieces: cur.pieces[:0]}
	if cur.stage != nil {
		p.in.Put(cur.stage)
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
			in.onDone.inboundDone(in.final)
		}
	}
}
