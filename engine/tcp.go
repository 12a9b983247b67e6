package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/wire"
)

// The TCP data path. A Put sends its request and then the bytes in Data
// frames on the same connection; the owner's reader reads each frame's
// bytes straight into the target (host memory) or into a staging buffer
// that its DMA engine then copies to Gaudi memory, and answers with a
// Completion once every byte has landed. A Get is answered with Data
// frames and then a Completion; the requester lands them the same way.
// Nothing is copied through an intermediate buffer on the host path.
//
// Request ids are split between the two sides (the dialer's are odd, the
// acceptor's even), so a Data frame names unambiguously whose request it
// belongs to. The reader never writes to the socket (a reader blocked on
// a full send buffer while its peer does the same would deadlock both):
// its replies go through the endpoint's writer goroutine.

const (
	tcpChunk     = 1 << 20  // bytes per Data frame
	tcpInlineMax = 64 << 10 // host Puts up to this size are sent by the caller
	tcpMaxFrame  = 64 << 10 // control frames
	maxInbound   = 4096     // transfers a peer may have in progress toward us
	stageBuffers = 8        // per pool (inbound, outbound), tcpChunk each
)

// inbound is a transfer whose bytes arrive on the connection: a peer's Put
// into our memory, or the answer to one of our Gets. The reader lands the
// bytes; it finishes (onDone, once) when every byte has landed and every
// staging DMA is complete, or when it was canceled and nothing is in
// flight any more.
type inbound struct {
	id      uint64
	dst     Slice // zero for a transfer whose bytes are dropped
	discard bool
	n       uint64

	mu       sync.Mutex
	got      uint64
	routing  bool // the reader is reading bytes into dst
	dmas     int  // staging DMAs in flight
	canceled bool
	done     bool
	err      error
	onDone   func(error)
}

// finishLocked reports whether the transfer just finished (the caller
// then calls onDone with err, outside the lock).
func (in *inbound) finishLocked() bool {
	if in.done || in.routing || in.dmas > 0 || (in.got < in.n && !in.canceled) {
		return false
	}
	in.done = true
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
		in.onDone(in.err)
	}
}

// routed is what the reader's sink chose for the Data frame being read.
type routed struct {
	in    *inbound
	off   uint64
	n     uint64
	stage *Buffer
}

// route is the reader's DataSink.
func (ep *Endpoint) route(id, off uint64, n int) ([]byte, error) {
	ep.cur = routed{}
	ep.mu.Lock()
	in := ep.inbound[id]
	ep.mu.Unlock()
	if in == nil {
		if ep.ours(id) && id <= ep.nextID.Load() {
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
			ep.removeInbound(id)
		}
		return nil, nil
	}
	in.routing = true
	in.mu.Unlock()
	ep.cur = routed{in: in, off: off, n: uint64(n)}
	if !in.dst.buf.loc.gaudi {
		return in.dst.hostBytes()[off : off+uint64(n)], nil
	}
	stage, err := ep.e.inStage.get(context.Background(), ep.done)
	if err != nil {
		return nil, err
	}
	ep.cur.stage = stage
	return stage.Bytes()[:n], nil
}

// landed finishes the Data frame route chose, once its bytes are read.
func (ep *Endpoint) landed() {
	cur := ep.cur
	ep.cur = routed{}
	in := cur.in
	if in == nil {
		return
	}
	ep.bytesIn.Add(cur.n)
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
		ep.removeInbound(in.id)
	}
	if cur.stage != nil && !dma {
		ep.e.inStage.put(cur.stage)
	}
	if dma {
		e := ep.e
		f := e.copyInternal(in.dst.buf.Slice(int(in.dst.off+cur.off), int(cur.n)), cur.stage.Slice(0, int(cur.n)), time.Time{})
		e.async.Add(1)
		go func() {
			defer e.async.Done()
			<-f.Done()
			e.inStage.put(cur.stage)
			in.mu.Lock()
			in.dmas--
			if err := f.Err(); err != nil && in.err == nil {
				in.err = err
			}
			fin := in.finishLocked()
			in.mu.Unlock()
			if fin {
				in.onDone(in.err)
			}
		}()
	}
	if fin {
		in.onDone(in.err)
	}
}

// abortRouting undoes a route whose read failed (the connection broke).
func (ep *Endpoint) abortRouting() {
	cur := ep.cur
	ep.cur = routed{}
	if cur.stage != nil {
		ep.e.inStage.put(cur.stage)
	}
	if in := cur.in; in != nil {
		// A transfer canceled while its bytes were being read (its reply
		// part failed: the endpoint's failure, a timeout) was left to
		// this route to finish, and is no longer in ep.inbound for
		// cancelInbound to find: finish it here, or it never resolves.
		in.mu.Lock()
		in.routing = false
		fin := in.finishLocked()
		in.mu.Unlock()
		if fin {
			in.onDone(in.err)
		}
	}
}

func (ep *Endpoint) addInbound(in *inbound) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.failed != nil {
		return ep.failed
	}
	if len(ep.inbound) >= maxInbound {
		return fmt.Errorf("more than %d transfers in progress", maxInbound)
	}
	if _, dup := ep.inbound[in.id]; dup {
		return fmt.Errorf("request id %d reused while in progress", in.id)
	}
	ep.inbound[in.id] = in
	return nil
}

func (ep *Endpoint) removeInbound(id uint64) {
	ep.mu.Lock()
	delete(ep.inbound, id)
	ep.mu.Unlock()
}

// cancelInbound cancels every transfer still landing (the connection is
// gone).
func (ep *Endpoint) cancelInbound(err error) {
	ep.mu.Lock()
	ins := make([]*inbound, 0, len(ep.inbound))
	for _, in := range ep.inbound {
		ins = append(ins, in)
	}
	clear(ep.inbound)
	ep.mu.Unlock()
	for _, in := range ins {
		in.cancel(err)
	}
}

// servePutTCP starts landing a peer's Put (its bytes follow on the
// connection). It answers a refusal at once; the bytes are then dropped.
func (ep *Endpoint) servePutTCP(r wire.Request) error {
	if ep.ours(r.RequestID) {
		return fmt.Errorf("Put with request id %d of our parity", r.RequestID)
	}
	in := &inbound{id: r.RequestID, n: r.Length}
	mine, st, msg := ep.e.lookupKey(&r.Key, r.Offset, r.Length, wire.KeyWrite)
	if st == wire.StatusOK {
		if err := mine.buf.acquire(); err != nil {
			st, msg = wire.StatusStale, "buffer no longer exported"
		}
	}
	if st != wire.StatusOK {
		in.discard = true
		in.onDone = func(error) {}
		if err := ep.queueReply(wire.NewError(r.RequestID, st, msg)); err != nil {
			return err
		}
	} else {
		in.dst = mine
		in.onDone = func(err error) {
			mine.buf.release()
			var rep wire.Message = &wire.Completion{RequestID: r.RequestID, Status: wire.StatusOK}
			if err != nil {
				rep = wire.NewError(r.RequestID, wire.StatusInternal, err.Error())
			} else {
				ep.served.Add(1)
			}
			if ep.Err() == nil {
				_ = ep.queueReply(rep)
			}
		}
	}
	if r.Length == 0 {
		in.mu.Lock()
		fin := in.finishLocked()
		in.mu.Unlock()
		if fin {
			in.onDone(nil)
		}
		return nil
	}
	if err := ep.addInbound(in); err != nil {
		in.cancel(err)
		return err
	}
	return nil
}

// serveGetTCP answers a peer's Get with Data frames and a Completion, on
// a goroutine of its own.
func (ep *Endpoint) serveGetTCP(r wire.Request) error {
	if ep.ours(r.RequestID) {
		return fmt.Errorf("Get with request id %d of our parity", r.RequestID)
	}
	select {
	case ep.sem <- struct{}{}:
	default:
		return ep.queueReply(wire.NewError(r.RequestID, wire.StatusNoResources, "too many requests in progress"))
	}
	ep.serving.Add(1)
	// Engine.Close waits for async work before it releases buffers: the
	// send below reads one of ours (an endpoint that failed is no longer
	// in the engine's list, so closing endpoints does not wait for it).
	ep.e.async.Add(1)
	go func() {
		defer ep.e.async.Done()
		defer ep.serving.Done()
		defer func() { <-ep.sem }()
		mine, st, msg := ep.e.lookupKey(&r.Key, r.Offset, r.Length, wire.KeyRead)
		if st == wire.StatusOK {
			if err := mine.buf.acquire(); err != nil {
				st, msg = wire.StatusStale, "buffer no longer exported"
			}
		}
		if st != wire.StatusOK {
			_ = ep.c.Send(wire.NewError(r.RequestID, st, msg))
			return
		}
		err := ep.sendSlice(r.RequestID, mine, nil, time.Time{})
		mine.buf.release()
		switch {
		case err == nil:
			ep.served.Add(1)
			_ = ep.c.Send(&wire.Completion{RequestID: r.RequestID, Status: wire.StatusOK})
		case errors.Is(err, errSourceFailed):
			_ = ep.c.Send(wire.NewError(r.RequestID, wire.StatusInternal, err.Error()))
		default:
			ep.fail(ep.sendErr(err)) // the stream is broken or the peer gone
		}
	}()
	return nil
}

// errSourceFailed marks a sendSlice failure in reading the source (a
// device DMA), after which the connection is still in step.
var errSourceFailed = errors.New("reading the source failed")

// sendSlice sends s as Data frames of request id (the first one behind
// first, when given). Host memory goes out from where it is; Gaudi memory
// through two staging buffers, the DMA of chunk k+1 overlapping the send
// of chunk k.
func (ep *Endpoint) sendSlice(id uint64, s Slice, first wire.Message, deadline time.Time) error {
	n := s.n
	if n == 0 {
		if first != nil {
			return ep.c.Send(first)
		}
		return nil
	}
	send := func(off uint64, p []byte) error {
		var err error
		if off == 0 && first != nil {
			err = ep.c.SendWithData(append(ep.takeReplies(), first), id, 0, p)
		} else {
			err = ep.c.SendData(id, off, p)
		}
		if err == nil {
			ep.bytesOut.Add(uint64(len(p)))
		}
		return err
	}
	if !s.buf.loc.gaudi {
		b := s.hostBytes()
		for off := uint64(0); off < n; off += tcpChunk {
			if err := send(off, b[off:min(off+tcpChunk, n)]); err != nil {
				return err
			}
		}
		return nil
	}
	e := ep.e
	var stage [2]*Buffer
	var fut [2]*Future
	defer func() {
		for k, b := range stage {
			if b != nil {
				if fut[k] != nil {
					<-fut[k].Done()
				}
				e.outStage.put(b)
			}
		}
	}()
	// One buffer is waited for, a second taken only if free: senders
	// that each hold one and wait for another would deadlock.
	b, err := e.outStage.get(context.Background(), ep.done)
	if err != nil {
		return err
	}
	stage[0] = b
	if n > tcpChunk {
		stage[1] = e.outStage.tryGet()
	}
	fetch := func(k int, off uint64) {
		m := int(min(tcpChunk, n-off))
		fut[k] = e.copyInternal(stage[k].Slice(0, m), s.buf.Slice(int(s.off+off), m), deadline)
	}
	// A DMA that fails does not stop the stream: the receiver expects n
	// bytes, so the rest goes out as zeros and the failure is reported
	// (a failed transfer leaves its destination undefined).
	var srcErr error
	fetch(0, 0)
	for i, off := 0, uint64(0); off < n; i, off = i+1, off+tcpChunk {
		k := i & 1
		if stage[1] == nil {
			k = 0
		}
		m := min(tcpChunk, n-off)
		if fut[k] != nil {
			if err := fut[k].Wait(context.Background()); err != nil && srcErr == nil {
				srcErr = fmt.Errorf("%w: %w", errSourceFailed, err)
			}
			fut[k] = nil
		}
		if srcErr != nil {
			clear(stage[k].Bytes()[:m])
		}
		next := off + tcpChunk
		if stage[1] != nil && next < n && srcErr == nil {
			fetch(k^1, next) // overlaps the send below
		}
		if err := send(off, stage[k].Bytes()[:m]); err != nil {
			return err
		}
		if stage[1] == nil && next < n && srcErr == nil {
			fetch(0, next)
		}
	}
	return srcErr
}

// tcpOp is a Put or Get this side requested over TCP. It completes when
// its two parts are done: the reply and, for a Put, the sending of its
// bytes, for a Get, the landing of the answer's bytes.
type tcpOp struct {
	ep    *Endpoint
	id    uint64
	local Slice
	f     *Future
	in    *inbound // Get
	parts atomic.Int32
	mu    sync.Mutex
	err   error
	timer *time.Timer
}

func (o *tcpOp) partDone(err error) {
	if err != nil {
		o.mu.Lock()
		if o.err == nil {
			o.err = err
		}
		o.mu.Unlock()
	}
	if o.parts.Add(-1) != 0 {
		return
	}
	if o.timer != nil {
		o.timer.Stop()
	}
	o.local.buf.release()
	o.mu.Lock()
	err = o.err
	o.mu.Unlock()
	o.f.complete(0, err)
}

// onReply takes the owner's answer (or the endpoint's failure).
func (o *tcpOp) onReply(r reply) {
	err := r.err
	if err == nil {
		err = o.ep.replyErr(r.f)
	}
	if err == nil && o.in != nil {
		// The owner sends every byte before its Completion, on the same
		// stream: the reader has read them all by now.
		o.in.mu.Lock()
		short := o.in.got < o.in.n
		o.in.mu.Unlock()
		if short {
			err = o.ep.peerErr(fmt.Sprintf("request %d completed before all its data arrived", o.id), nil)
			o.ep.fail(err)
		}
	}
	if err != nil && o.in != nil {
		o.ep.removeInbound(o.id)
		o.in.cancel(err)
	}
	o.partDone(err)
}

// timeout fails the operation at its deadline; bytes still in flight are
// waited for (the buffer is in use until then) or dropped.
func (o *tcpOp) timeout() {
	ep := o.ep
	ep.mu.Lock()
	_, waiting := ep.pending[o.id]
	delete(ep.pending, o.id)
	ep.mu.Unlock()
	if !waiting {
		return // the reply came first
	}
	err := newErr(ErrTimeout, ep.name+": request "+fmt.Sprint(o.id), nil)
	if o.in != nil {
		ep.removeInbound(o.id)
		o.in.cancel(err)
	}
	o.partDone(err)
}

// rmaTCP runs a Put or Get over the TCP data path.
//
// The operation completes f (one Complete call) when given: a part of a
// transfer split over the endpoint's lanes. It returns f.
func (ep *Endpoint) rmaTCP(put bool, local Slice, k wire.RemoteKey, opts []OpOption, f *Future) *Future {
	e := ep.e
	if f == nil {
		f = newFuture(1)
		f.setSpin(e.cfg.WaitSpin)
	}
	if err := local.buf.acquire(); err != nil {
		f.complete(0, err)
		return f
	}
	o := &tcpOp{ep: ep, id: ep.newID(), local: local, f: f}
	o.parts.Store(2)
	req := wire.Request{RequestID: o.id, Key: k, Length: local.n, Local: wire.Local{Kind: wire.LocalInline}}
	if !put {
		o.in = &inbound{id: o.id, dst: local, n: local.n, onDone: o.partDone}
	}
	ep.mu.Lock()
	if ep.failed != nil {
		err := ep.failed
		ep.mu.Unlock()
		local.buf.release()
		f.complete(0, err)
		return f
	}
	ep.pending[o.id] = o.onReply
	if o.in != nil && local.n > 0 {
		ep.inbound[o.id] = o.in
	}
	ep.mu.Unlock()
	if oc := e.opConfig(opts); !oc.deadline.IsZero() {
		o.timer = time.AfterFunc(time.Until(oc.deadline), o.timeout)
	}
	if put {
		send := func() {
			err := ep.sendSlice(o.id, local, &wire.Put{Request: req}, time.Time{})
			if err != nil && !errors.Is(err, errSourceFailed) {
				// The stream is broken or the peer gone: no reply will
				// come, and the endpoint's failure answers every request.
				err = ep.sendErr(err)
				ep.fail(err)
			}
			o.partDone(err)
		}
		if !local.buf.loc.gaudi && local.n <= tcpInlineMax {
			// Sent from the caller's goroutine: inside the close gate, so
			// Close (which closes the connection first) unmaps nothing
			// that this send still reads.
			if !e.enter() {
				ep.fail(ErrClosed)
				o.partDone(ErrClosed)
				return o.f
			}
			e.gateHook()
			send()
			e.exit()
			return o.f
		}
		e.async.Add(1)
		go func() {
			defer e.async.Done()
			send()
		}()
		return o.f
	}
	if local.n == 0 {
		o.partDone(nil) // nothing will land
	}
	if err := ep.c.Send(&wire.Get{Request: req}); err != nil {
		// No reply will come: take the pending entry back, if the
		// endpoint's failure has not already.
		ep.mu.Lock()
		_, still := ep.pending[o.id]
		delete(ep.pending, o.id)
		ep.mu.Unlock()
		if still {
			o.onReply(reply{err: ep.sendErr(err)})
		}
	}
	return o.f
}
