package tcp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// op is a Put or Get this side requested. It completes when its two parts
// are done: the reply and, for a Put, the sending of its bytes, for a Get,
// the landing of the answer's bytes.
//
// It is abandoned when its context ends or its deadline passes: the reply
// is no longer waited for, a Put sends no more Data frames (the owner is
// told with a wire.Cancel), a Get's bytes still arriving are dropped (and
// the owner asked to stop sending them); it resolves once no frame reads
// or writes its local memory.
type op struct {
	reqState
	local datapath.Mem
	c     datapath.Completer
	// A Put's sending (sendPut): its request, and the context and
	// deadline its wait for a staging buffer ends with. Kept here, a Put
	// allocates no closure, request and message for its goroutine.
	put      wire.Put
	ctx      context.Context
	deadline time.Time
}

// reqState is what a request of this path (op, listOp) keeps while it
// runs: it ends when its parts (the sending of a Put's bytes or the
// landing of a Get's, and the owner's reply) are done, or is abandoned.
type reqState struct {
	p     *path
	id    uint64
	in    *inbound // a Get's
	parts atomic.Int32

	mu       sync.Mutex
	err      error       // the whole request's
	stopped  atomic.Bool // abandoned: send nothing more
	timer    *time.Timer
	finished bool // both parts are done

	// The context watch (the path's ctxWatch): watched while in it, the
	// owner abandoned with what naming the request when the context ends.
	watched bool
	wn      ctxNode
	owner   abandoner
	what    string
}

// abandoner is a request abandoned when its context ends or its deadline
// passes (op, listOp).
type abandoner interface{ abandon(error) }

// setErr keeps the request's first error.
func (r *reqState) setErr(err error) {
	if err == nil {
		return
	}
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

// lastPart reports whether this was the request's last part; the last
// marks it finished and stops its watches.
func (r *reqState) lastPart() bool {
	if r.parts.Add(-1) != 0 {
		return false
	}
	r.p.outstanding.Add(-1)
	r.mu.Lock()
	r.finished = true
	timer, watched := r.timer, r.watched
	r.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	if watched {
		r.p.ctxw.remove(&r.wn)
	}
	return true
}

// watch abandons the request (what names it in errors) when ctx ends or
// its deadline passes, unless it finished first.
func (r *reqState) watch(ctx context.Context, deadline time.Time, what string, a abandoner) {
	// The name is made only when the request is abandoned (a request
	// that finishes, nearly all, never needs it), and the timer's
	// callback only when there is a deadline: a closure made here at
	// every request would be allocated whether it is used or not. The
	// context is watched with the path's other requests (ctxWatch).
	r.mu.Lock()
	if !r.finished && !deadline.IsZero() {
		r.timer = time.AfterFunc(time.Until(deadline), func() {
			a.abandon(gxerr.New(gxerr.Timeout, r.name(what), nil))
		})
	}
	if !r.finished && ctx.Done() != nil {
		r.owner, r.what = a, what
		r.watched = r.p.ctxw.add(ctx, &r.wn, r)
	}
	r.mu.Unlock()
}

// ctxEnded abandons the request: the context it watched ended.
func (r *reqState) ctxEnded(ctx context.Context) {
	r.owner.abandon(gxerr.Ctx(r.name(r.what), ctx.Err()))
}

// name names the request in the error of its abandonment.
func (r *reqState) name(what string) string {
	return r.p.c.Name() + ": " + what + " " + strconv.FormatUint(r.id, 10)
}

// stop is the first half of abandoning the request: nothing more is sent,
// the reply no longer waited for, a Get's bytes still arriving dropped
// (and, cancel, the owner asked to stop sending them). false: the reply
// (or the endpoint's failure) came first.
func (r *reqState) stop(err error, cancel bool) bool {
	r.stopped.Store(true)
	p := r.p
	if !p.c.Forget(r.id) {
		return false
	}
	if r.in != nil {
		if in := p.removeInbound(r.id); in != nil {
			in.cancel(err)
		}
		if cancel {
			// What is on its way is dropped: the id is no longer in
			// p.inbound. A Cancel that overtakes its Get is ignored, and
			// the Get's answer dropped.
			_ = p.c.QueueReply(&wire.Cancel{RequestID: r.id})
		}
	}
	return true
}

// inboundDone: the answer to a Get has landed (partDone).
func (o *op) inboundDone(err error) { o.partDone(err) }

func (o *op) partDone(err error) {
	o.setErr(err)
	if !o.lastPart() {
		return
	}
	o.mu.Lock()
	err = o.err
	o.mu.Unlock()
	o.local.B.Release()
	o.c.Complete(0, err)
}

// Reply takes the owner's answer (or the endpoint's failure): the
// request's datapath.Replier.
func (o *op) Reply(f wire.Frame, err error) {
	if err == nil {
		err = o.p.c.ReplyErr(f)
	}
	o.partDone(o.replied("request", err))
}

// replied is the outcome of a request whose reply came with err (nil:
// success): a Get whose bytes did not all arrive before its reply fails
// (and the endpoint with it: the owner sends every byte before its reply,
// on the same stream, so the reader has read them all by now), and a
// failed Get stops landing bytes.
func (r *reqState) replied(what string, err error) error {
	p := r.p
	if err == nil && r.in != nil {
		r.in.mu.Lock()
		short := r.in.got < r.in.n
		r.in.mu.Unlock()
		if short {
			err = p.c.PeerErr(fmt.Sprintf("%s %d completed before all its data arrived", what, r.id), nil)
			p.c.Fail(err)
		}
	}
	if err != nil && r.in != nil {
		p.removeInbound(r.id)
		r.in.cancel(err)
	}
	return err
}

// abandon ends the operation early with err (its context ended, its
// deadline passed): the reply is no longer waited for, a Put's sender
// stops before its next frame, a Get's bytes are dropped.
func (o *op) abandon(err error) {
	if o.stop(err, o.p.cancelCap) {
		o.partDone(err)
		if o.p.puts.remove(o) {
			// Still queued: nothing of its memory was read, nothing sent.
			o.partDone(nil)
		}
	}
}

// Start runs a Put or Get (lanes.go splits large ones over the lanes and
// spreads the others).
func (p *path) Start(ctx context.Context, r datapath.Req, c datapath.Completer) {
	if ls := p.laneSnap.Load(); r.Local.Len >= laneMin && ls != nil && len(*ls) > 0 {
		p.startLanes(ctx, r, c)
		return
	}
	p.pick().start(ctx, r, c)
}

// start runs a Put or Get on this connection.
func (p *path) start(ctx context.Context, r datapath.Req, c datapath.Completer) {
	local := r.Local
	if err := local.B.Acquire(); err != nil {
		c.Complete(0, err)
		return
	}
	o := &op{reqState: reqState{p: p, id: p.newID()}, local: local, c: c}
	o.parts.Store(2)
	req := wire.Request{RequestID: o.id, Key: r.Key, Length: local.Len, Local: wire.Local{Kind: wire.LocalInline}}
	if !r.Put {
		o.in = &inbound{id: o.id, dst: local, n: local.Len, onDone: o}
	}
	// Wait for one of the connection's request slots: beyond the peer's
	// limit of requests in progress it would refuse them.
	if err := p.c.ExpectRequest(ctx, o.id, o); err != nil {
		local.B.Release()
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			err = gxerr.Ctx(p.c.Name()+": waiting for a request slot", err)
		}
		c.Complete(0, err)
		return
	}
	p.outstanding.Add(1) // until partDone's last part
	if o.in != nil && local.Len > 0 {
		if err := p.addInbound(o.in); err != nil {
			if p.c.Forget(o.id) {
				o.parts.Store(1)
				o.partDone(err)
			}
			return
		}
	}
	o.watch(ctx, r.Deadline, "request", o)
	if r.Put {
		p.startPut(ctx, r.Deadline, o, req)
		return
	}
	if local.Len == 0 {
		o.partDone(nil) // nothing will land
	}
	if err := p.c.Conn().Send(&wire.Get{Request: req}); err != nil {
		// No reply will come: take the registration back, if the
		// endpoint's failure (or an abandon) has not already.
		if p.c.Forget(o.id) {
			o.Reply(wire.Frame{}, p.sendErr(err))
		}
	}
}

// startPut sends a Put's request and bytes: on the caller's goroutine for
// small host transfers; larger host ones queue for the connection, sent in
// order by one drain task (drainPuts); Gaudi ones on a goroutine of their
// own. The wait for a staging buffer ends with ctx or at the deadline
// (abandon has then resolved the Put: nothing of its memory is read yet).
func (p *path) startPut(ctx context.Context, deadline time.Time, o *op, req wire.Request) {
	o.put, o.ctx, o.deadline = wire.Put{Request: req}, ctx, deadline
	if !o.local.IsGaudi() && o.local.Len <= inlineMax {
		// Sent from the caller's goroutine: inside the close gate, so
		// Close (which closes the connection first) unmaps nothing that
		// this send still reads.
		if !p.env.Enter() {
			p.c.Fail(gxerr.Closed)
			o.partDone(gxerr.Closed)
			return
		}
		o.sendPut()
		p.env.Exit()
		return
	}
	if o.local.IsGaudi() {
		// Its own goroutine: it may wait for a staging buffer, which must
		// not hold up the host Puts behind it.
		p.env.Go(o.sendPut)
		return
	}
	if p.puts.push(o) {
		p.env.Go(p.drain)
	}
}

// drainPuts sends the queued host Puts one after the other, until none is
// left: while puts keep the connection busy, each is sent without a
// goroutine of its own to start and without waiting for the connection's
// write lock behind the others.
func (p *path) drainPuts() {
	for {
		o := p.puts.pop()
		if o == nil {
			return
		}
		o.sendPut()
	}
}

// sendPut sends the Put's request and bytes (startPut).
func (o *op) sendPut() {
	p := o.p
	sctx, cancel := datapath.WithDeadline(o.ctx, o.deadline)
	defer cancel()
	sent, err := p.sendMem(sctx, o.id, 0, o.local, &o.put, o.stopped.Load)
	o.ctx = nil // nothing of the caller's context stays with the op
	switch {
	case errors.Is(err, errStopped):
		// Abandoned (abandon completed the reply part with why).
		// Nothing reads the local memory any more.
		o.partDone(nil)
		if sent > 0 { // the request went out with the first bytes
			p.endPut(o.id, sent, o.local.Len)
		}
		return
	case err != nil && !errors.Is(err, errSourceFailed):
		// The stream is broken or the peer gone: no reply will
		// come, and the endpoint's failure answers every request.
		err = p.sendErr(err)
		p.c.Fail(err)
	}
	o.partDone(err)
}

// endPut tells the owner that a Put whose sending stopped after sent of
// its n bytes is over: a wire.Cancel, or, for a peer that does not
// understand one, zeros for the rest of the bytes.
func (p *path) endPut(id, sent, n uint64) {
	if sent >= n {
		return // every byte went out: the owner completes it (unheard)
	}
	var err error
	if p.cancelCap {
		err = p.c.Conn().Send(&wire.Cancel{RequestID: id, Sent: sent})
	} else {
		err = p.sendZeros(id, sent, n)
	}
	if err != nil {
		p.c.Fail(p.sendErr(err))
	}
}
