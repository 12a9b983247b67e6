package tcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// Lists (datapath.Lister): a list of Puts or Gets is cut into at most one
// group per lane, balanced by bytes (a list smaller than laneMin goes
// whole to one connection), and each group is moved as one request: a
// wire.PutList or wire.GetList naming every entry, then the entries'
// bytes back to back in Data frames of that request (a frame of up to
// Chunk bytes spans entries: one vectored write of the pieces, one
// vectored read into them, routeV), and one wire.ListReply with every entry's
// status. A group longer than a request may carry (wire.MaxListEntries,
// wire.MaxListKeys) is cut into several requests, sent one after the
// other on its connection. A peer that did not announce wire.CapList
// (and wire.CapCancel) gets the list element by element (Start).

var _ datapath.Lister = (*path)(nil)

// listCaps are what a peer must announce for lists.
const listCaps = wire.CapList | wire.CapCancel

// StartList runs a list of Puts or Gets (datapath.Lister).
func (p *path) StartList(ctx context.Context, reqs []datapath.Req, c datapath.Completer) {
	if !p.listCap {
		for i, r := range reqs {
			p.Start(ctx, r, shifted{c: c, base: i})
		}
		return
	}
	if len(reqs) == 0 {
		return
	}
	var total uint64
	host := true
	for _, r := range reqs {
		total += r.Local.Len
		host = host && !r.Local.IsGaudi()
	}
	lanes := []*path{p}
	if ls := p.laneSnap.Load(); total >= laneMin && ls != nil && len(*ls) > 0 {
		lanes = append(lanes, *ls...)
	} else {
		lanes[0] = p.pick()
	}
	put := reqs[0].Put
	for g, rg := range splitList(reqs, total, len(lanes)) {
		l := lanes[g]
		ops := l.listOps(reqs[rg[0]:rg[1]], rg[0], c)
		run := func() {
			for _, o := range ops {
				l.startList(ctx, o)
				l.t.putListEntries(o.msg.Entries) // (sent, or never to be)
				o.msg.Entries = nil
			}
		}
		switch {
		case !put:
			run() // requests only: the owner streams the bytes
		case host && total <= inlineMax:
			// Sent from the caller's goroutine, inside the close gate
			// (as Start's small Puts).
			if !p.env.Enter() {
				p.c.Fail(gxerr.Closed)
				for _, o := range ops {
					o.completeAll(gxerr.Closed)
					l.t.putListEntries(o.msg.Entries)
				}
				continue
			}
			run()
			p.env.Exit()
		default:
			p.env.Go(run)
		}
	}
}

// splitList cuts reqs into at most parts runs of about equal bytes.
func splitList(reqs []datapath.Req, total uint64, parts int) [][2]int {
	groups := make([][2]int, 0, parts)
	start, acc := 0, uint64(0)
	per := total / uint64(parts)
	for i, r := range reqs {
		acc += r.Local.Len
		if len(groups) < parts-1 && acc >= per*uint64(len(groups)+1) && per > 0 {
			groups = append(groups, [2]int{start, i + 1})
			start = i + 1
		}
	}
	if start < len(reqs) {
		groups = append(groups, [2]int{start, len(reqs)})
	}
	return groups
}

// listOps cuts a group of requests (the first one the user's entry base)
// into list requests within the wire's limits. A key travels once per
// request, its view widened to its grant (the owner checks grants, not
// views), each entry's offset then relative to the grant.
func (p *path) listOps(reqs []datapath.Req, base int, c datapath.Completer) []*listOp {
	var ops []*listOp
	var o *listOp
	var keys map[wire.RemoteKey]uint16
	last := -1 // the key index of the entry before, in o.msg.Keys
	first := 0 // o's first request, in reqs
	for i := range reqs {
		r := &reqs[i]
		k := r.Key
		k.Offset, k.Len = k.GrantOffset, k.GrantLen
		// Entries of one key usually follow each other: compared with
		// the last one's, a key needs no hashing.
		var idx uint16
		ok := last >= 0 && o.msg.Keys[last] == k
		if ok {
			idx = uint16(last)
		} else {
			idx, ok = keys[k]
		}
		if o == nil || len(o.msg.Entries) == wire.MaxListEntries || (!ok && len(o.msg.Keys) == wire.MaxListKeys) {
			if o != nil {
				o.reqs = reqs[first:i]
			}
			o = &listOp{reqState: reqState{p: p}, put: r.Put, base: base + i, c: c, deadline: r.Deadline}
			o.msg.Entries = p.t.listEntries(min(len(reqs)-i, wire.MaxListEntries))
			ops = append(ops, o)
			keys = nil
			ok = false
			first = i
		}
		if !ok {
			idx = uint16(len(o.msg.Keys))
			if idx > 0 { // (a request's only key is found as the last one)
				if keys == nil {
					keys = make(map[wire.RemoteKey]uint16, 2)
					keys[o.msg.Keys[0]] = 0
				}
				keys[k] = idx
			}
			o.msg.Keys = append(o.msg.Keys, k)
		}
		last = int(idx)
		o.msg.Entries = append(o.msg.Entries, wire.ListEntry{Key: idx, Offset: r.Key.Offset - r.Key.GrantOffset, Length: r.Local.Len})
		o.total += r.Local.Len
	}
	if o != nil {
		o.reqs = reqs[first:]
	}
	return ops
}

// acquire holds the local memory of the entries of o, once per run of
// entries of one buffer (a list's entries are mostly slices of a few
// buffers: a thousand atomic operations on one word are not free). The
// entries of a run whose buffer cannot be held (freed since the engine
// checked the list) are dropped: each fails alone with its buffer's
// error, and the request names it with no bytes. It returns how many
// entries were dropped.
func (o *listOp) acquire() int {
	var held datapath.Buf
	var err error
	dropped := 0
	for i := range o.reqs {
		if b := o.reqs[i].Local.B; b != held {
			held, err = b, b.Acquire()
		}
		if err != nil {
			o.drop(i, err)
			dropped++
		}
	}
	return dropped
}

// drop takes entry i out of the request (before it is sent): it fails
// with err, whatever happens to the others, and moves no bytes.
func (o *listOp) drop(i int, err error) {
	if o.dropped == nil {
		o.dropped = make([]bool, len(o.reqs))
	}
	o.dropped[i] = true
	o.entryErr(i, err)
	o.total -= o.msg.Entries[i].Length
	o.msg.Entries[i].Length = 0
}

// isDropped reports whether entry i was dropped (acquire).
func (o *listOp) isDropped(i int) bool { return o.dropped != nil && o.dropped[i] }

// release lets go of what acquire held.
func (o *listOp) release() {
	var held datapath.Buf
	for i := range o.reqs {
		if o.isDropped(i) {
			held = nil
			continue
		}
		if b := o.reqs[i].Local.B; b != held {
			b.Release()
			held = b
		}
	}
}

// shifted completes entry base of a list for a Start of its own.
type shifted struct {
	c    datapath.Completer
	base int
}

func (s shifted) Complete(i int, err error) { s.c.Complete(s.base+i, err) }
func (s shifted) CompleteAll(err error)     { s.c.CompleteAll(err) }

// listOp is one list request this side made: entries base.. of the
// user's list. Like op, it completes when its two parts are done (the
// reply; for a PutList the sending of its bytes, for a GetList their
// landing) or is abandoned (ctx, deadline).
type listOp struct {
	reqState
	put      bool
	base     int
	c        datapath.Completer
	deadline time.Time
	msg      wire.ListRequest
	// reqs are the entries' requests, the engine's (datapath.Lister: read
	// only until each is completed).
	reqs  []datapath.Req
	total uint64
	errs  []error // per entry (nil: none failed), under mu
	// dropped (nil: none) marks the entries whose buffer acquire could
	// not hold: sent with no bytes, failed with errs[i] whatever the
	// request's outcome. Written before the request is sent.
	dropped []bool
}

// completeAll resolves every entry of a request that never started with
// err, an entry dropped already with its own error (o.errs is written
// only by this goroutine until the request is sent).
func (o *listOp) completeAll(err error) {
	for i := range o.reqs {
		e := err
		if o.isDropped(i) {
			e = o.errs[i]
		}
		o.c.Complete(o.base+i, e)
	}
}

// entryErr records the failure of entry i.
func (o *listOp) entryErr(i int, err error) {
	o.mu.Lock()
	if o.errs == nil {
		o.errs = make([]error, len(o.reqs))
	}
	if o.errs[i] == nil {
		o.errs[i] = err
	}
	o.mu.Unlock()
}

// inboundDone: the answer to a GetList has landed (partDone).
func (o *listOp) inboundDone(err error) { o.partDone(err) }

func (o *listOp) partDone(err error) {
	o.setErr(err)
	if !o.lastPart() {
		return
	}
	o.mu.Lock()
	err, errs := o.err, o.errs
	o.mu.Unlock()
	n := len(o.reqs) // o.reqs is not read once its entries completed
	o.release()
	if mc, ok := o.c.(datapath.ManyCompleter); ok && err == nil && errs == nil {
		// Every entry succeeded: counted 64 at a time, not one by one.
		var idx [64]int
		for i := 0; i < n; i += len(idx) {
			k := min(n-i, len(idx))
			for j := range k {
				idx[j] = o.base + i + j
			}
			mc.CompleteOK(idx[:k])
		}
		return
	}
	for i := range n {
		e := err
		if (e == nil && errs != nil) || o.isDropped(i) {
			e = errs[i]
		}
		o.c.Complete(o.base+i, e)
	}
}

// Reply takes the owner's ListReply (or an Error refusing the whole
// request, or the endpoint's failure).
func (o *listOp) Reply(f wire.Frame, err error) {
	if err == nil {
		err = o.takeReply(f)
	}
	o.partDone(o.replied("list request", err))
}

// takeReply records the entries' statuses of a ListReply; an error is
// the whole request's.
func (o *listOp) takeReply(f wire.Frame) error {
	p := o.p
	if f.Header.Type != wire.TypeListReply {
		err := p.c.ReplyErr(f)
		if err == nil { // a Completion is no answer to a list
			err = p.c.PeerErr(fmt.Sprintf("list request %d answered with a %v", o.id, f.Header.Type), nil)
			p.c.Fail(err)
		}
		return err
	}
	var m wire.ListReply
	if err := f.Decode(&m); err != nil || len(m.Statuses) != len(o.reqs) {
		err = p.c.PeerErr(fmt.Sprintf("list request %d of %d entries: bad reply (%d statuses)", o.id, len(o.reqs), len(m.Statuses)), err)
		p.c.Fail(err)
		return err
	}
	msg := m.Message
	for i, st := range m.Statuses {
		if st != wire.StatusOK {
			o.entryErr(i, p.c.Refusal(fmt.Sprintf("list entry %d", o.base+i), wire.NewError(o.id, st, msg)))
			msg = "" // the message is the first failure's
		}
	}
	return nil
}

// abandon ends the request early with err (its context ended, its
// deadline passed), as op.abandon.
func (o *listOp) abandon(err error) {
	if o.stop(err, true) {
		o.partDone(err)
	}
}

// startList runs one list request on this connection; a PutList's bytes
// are sent before it returns.
func (p *path) startList(ctx context.Context, o *listOp) {
	if !o.deadline.IsZero() && !time.Now().Before(o.deadline) {
		// Its deadline passed while the requests before it went out.
		o.completeAll(gxerr.New(gxerr.Timeout, p.c.Name()+": list request not started before its deadline", nil))
		return
	}
	if o.acquire() == len(o.reqs) { // every entry dropped: nothing to send
		o.completeAll(nil)
		return
	}
	o.id = p.newID()
	o.msg.RequestID = o.id
	o.parts.Store(2)
	if !o.put {
		segs := make([]seg, len(o.reqs))
		var end uint64
		for i := range o.reqs {
			m := o.reqs[i].Local
			if o.isDropped(i) {
				m.Len = 0
			}
			end += m.Len
			segs[i] = seg{end: end, dst: m}
		}
		o.in = &inbound{id: o.id, n: o.total, segs: segs, onDone: o}
	}
	if err := p.c.ExpectRequest(ctx, o.id, o); err != nil {
		o.release()
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			err = gxerr.Ctx(p.c.Name()+": waiting for a request slot", err)
		}
		o.completeAll(err)
		return
	}
	p.outstanding.Add(1) // until partDone's last part
	if o.in != nil && o.total > 0 {
		if err := p.addInbound(o.in); err != nil {
			if p.c.Forget(o.id) {
				o.parts.Store(1)
				o.partDone(err)
			}
			return
		}
	}
	o.watch(ctx, o.deadline, "list request", o)
	if o.put {
		p.sendList(ctx, o)
		return
	}
	if o.total == 0 {
		o.partDone(nil) // nothing will land
	}
	if err := p.c.Conn().Send(&wire.GetList{ListRequest: o.msg}); err != nil {
		if p.c.Forget(o.id) {
			o.Reply(wire.Frame{}, p.sendErr(err))
		}
	}
}

// sendList sends a PutList and its entries' bytes, back to back. Its
// waits for staging buffers end with ctx or at the list's deadline
// (abandon has then resolved it), as a Put's (startPut).
func (p *path) sendList(ctx context.Context, o *listOp) {
	ctx, cancel := datapath.WithDeadline(ctx, o.deadline)
	defer cancel()
	s := &streamer{p: p, id: o.id, first: &wire.PutList{ListRequest: o.msg}, stop: o.stopped.Load}
	var err error
	for i := range o.reqs {
		m := o.reqs[i].Local
		if m.Len == 0 || o.isDropped(i) {
			continue
		}
		if err = s.mem(ctx, m); errors.Is(err, errSourceFailed) {
			// The entry went out as zeros (the stream is in step): it
			// alone fails.
			o.entryErr(i, err)
			err = nil
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = s.flush()
	}
	if err == nil && s.first != nil { // every entry is empty
		if o.stopped.Load() {
			err = errStopped
		} else if err = p.c.Conn().Send(s.first); err == nil {
			s.first = nil
		}
	}
	switch {
	case errors.Is(err, errStopped):
		// Abandoned (abandon completed the reply part with why): nothing
		// reads the local memory any more.
		o.partDone(nil)
		if s.first == nil { // the request went out
			p.endPut(o.id, s.sent, o.total)
		}
		return
	case err != nil:
		err = p.sendErr(err)
		p.c.Fail(err)
	}
	o.partDone(err)
}
