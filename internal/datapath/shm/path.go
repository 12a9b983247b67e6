package shm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// Path is the shared-memory data path of one endpoint.
type Path struct {
	t    *Transport
	c    datapath.Ctrl
	env  datapath.Env
	pid  ipc.PeerID
	name string

	mu     sync.Mutex
	failed bool                      // the endpoint ended: lend no more
	lent   map[datapath.Buf]struct{} // our buffers the peer mapped
}

var _ datapath.Path = (*Path)(nil)

// Kind is datapath.KindIPC.
func (p *Path) Kind() datapath.Kind { return datapath.KindIPC }

// Start runs a Put or Get. The peer's host memory is mapped here when the
// request carries a key granting the whole allocation (the mapping reaches
// all of it) and copied into or out of (rmaMapped); with a narrower grant
// only, for the peer's Gaudi memory, or for an allocation larger than the
// IPC cache's MaxBytes, the owner performs the copy from or into a bounce
// buffer of ours and checks the grant (rmaDevice).
func (p *Path) Start(ctx context.Context, r datapath.Req, c datapath.Completer) {
	if r.Key.MemType == wire.MemHost {
		mk := r.MapKey
		if r.Key.GrantOffset == 0 && r.Key.GrantLen == r.Key.Length {
			mk = &r.Key
		}
		if mk != nil && p.t.mappable(mk) {
			h, err := p.importKey(ctx, r.Deadline, *mk)
			if err != nil {
				c.Complete(0, p.importErr(err))
				return
			}
			p.rmaMapped(ctx, &r, h, c)
			return
		}
	}
	p.rmaDevice(ctx, r, c)
}

// Handle serves the peer's imports and requests, and drops the imports it
// invalidates.
func (p *Path) Handle(_ *wire.Frame, m wire.Message) (bool, error) {
	switch m := m.(type) {
	case *wire.ImportRequest:
		p.c.MarkActive()
		return true, p.serveImport(m)
	case *wire.Put:
		p.c.MarkActive()
		return true, p.serve(true, m.Request)
	case *wire.Get:
		p.c.MarkActive()
		return true, p.serve(false, m.Request)
	case *wire.Invalidate:
		p.t.imports.Invalidate(p.pid, m.AllocID, m.Generation)
	default:
		return false, nil
	}
	return true, nil
}

// Sink is nil: no data travels on the control connection.
func (p *Path) Sink() wire.DataSink { return nil }

// Landed is never called (no sink).
func (p *Path) Landed() {}

// Tick does nothing: the path has no timers.
func (p *Path) Tick() {}

// Failed drops this side's imports of the peer's memory made on this
// connection (each released at its last reference) and forgets the peer in
// our buffers it mapped.
func (p *Path) Failed(error) {
	p.t.imports.PurgePeer(p.pid)
	p.unlend()
}

// Closed has nothing left to release (Failed did).
func (p *Path) Closed(error) {}

// Stats adds nothing: the path has no counters of its own.
func (p *Path) Stats(*datapath.Stats) {}

// rmaMapped runs a Put or Get on the peer's host memory mapped here (h,
// held by the caller and released here): a copy between local and the
// mapping. The owner's validity flag is read before the copy (a key freed
// already is refused without copying) and after it: an allocation freed
// before or during the copy makes the operation fail as stale, because
// the bytes may have gone to (or come from) memory the allocation no
// longer owns.
func (p *Path) rmaMapped(ctx context.Context, r *datapath.Req, h *ipc.Handle[*imported], c datapath.Completer) {
	im := h.Value()
	if im.revoked() {
		p.t.imports.Put(h)
		c.Complete(0, p.staleImport(im, &r.Key))
		return
	}
	theirs := im.mem(r.Key.Offset, r.Key.Len)
	var w datapath.Waiter
	if r.Put {
		w = p.env.Copy(ctx, theirs, r.Local, r.Deadline)
	} else {
		w = p.env.Copy(ctx, r.Local, theirs, r.Deadline)
	}
	if w.IsDone() {
		err := w.Err()
		if err == nil && im.revoked() {
			err = p.staleImport(im, &r.Key)
		}
		p.t.imports.Put(h)
		c.Complete(0, err)
		return
	}
	k := r.Key
	p.env.Go(func() {
		<-w.Done()
		err := w.Err()
		if err == nil && im.revoked() {
			err = p.staleImport(im, &k)
		}
		p.t.imports.Put(h)
		c.Complete(0, err)
	})
}

// rmaDevice runs a Put or Get the peer performs (its Gaudi memory, or a
// key granting part of an allocation): remoteDMA, on a goroutine of its
// own within the engine's transfer slots. The slot is the operation's:
// once it has ended (its caller gave up) while the peer has not answered,
// the slot goes back, so that peers that never answer cannot hold them
// all. (A separate function so that the request escapes to the heap only
// on this path.)
func (p *Path) rmaDevice(ctx context.Context, r datapath.Req, c datapath.Completer) {
	if err := r.Local.B.Acquire(); err != nil {
		c.Complete(0, err)
		return
	}
	p.env.Go(func() {
		release, err := p.env.Slot(ctx)
		if err != nil {
			r.Local.B.Release()
			c.Complete(0, err)
			return
		}
		giveBack := sync.OnceFunc(release)
		defer giveBack()
		p.remoteDMA(ctx, &r, c, giveBack)
	})
}

// remoteDMA asks the peer to copy between its memory and ours. The peer
// imports the memory it copies from or to: always a bounce buffer of
// exactly this size, never the caller's buffer (a key to it would grant
// the peer the whole buffer, read-write, for as long as it stays mapped).
// A Put's data is copied into the bounce buffer before the request, a
// Get's out of it after (once the request succeeded).
//
// r.Local is acquired by the caller; remoteDMA releases it and completes c
// once nothing touches it any more. When ctx ends (or r.Deadline passes)
// what has not started is dropped: a copy into or out of the bounce
// buffer still queued, the request not yet sent, the copy out of the
// bounce buffer after the peer answered. A request the peer is
// performing does not touch r.Local: the operation ends at once (giving
// its transfer slot back), and the bounce buffer stays until the peer
// answered, the endpoint ended, or PeerTimeout passed (lateAnswer).
func (p *Path) remoteDMA(ctx context.Context, r *datapath.Req, c datapath.Completer, giveBack func()) {
	ctx, cancel := datapath.WithDeadline(ctx, r.Deadline)
	defer cancel()
	local := r.Local
	finish := func(err error) {
		local.B.Release()
		c.Complete(0, err)
	}
	bounce, err := p.env.AllocHost(local.Len)
	if err != nil {
		finish(err)
		return
	}
	region := datapath.Mem{B: bounce, Len: local.Len}
	free := func(err error) {
		if ferr := p.env.FreeHost(bounce); ferr != nil {
			p.t.log.Debug().Err(ferr).Msg("bounce buffer not freed")
		}
		if h := p.t.hooks.BounceFreed; h != nil {
			h(err)
		}
	}
	if r.Put {
		if err := copyWait(ctx, p.env, region, local); err != nil {
			free(err)
			finish(err)
			return
		}
	}
	ch, id, err := p.request(ctx, r, region)
	if err != nil {
		free(err)
		finish(err)
		return
	}
	select {
	case err = <-ch:
	case <-ctx.Done():
		select {
		case err = <-ch: // the answer came first
		default:
			// The peer performs the request into or out of the bounce
			// buffer, not r.Local: the operation ends now, the bounce
			// buffer once the peer is done with it.
			finish(gxerr.Ctx(p.name+": waiting for the peer's answer", ctx.Err()))
			giveBack()
			free(p.lateAnswer(ch, id))
			return
		}
	}
	if h := p.t.hooks.Answered; h != nil {
		h()
	}
	if err == nil && !r.Put {
		if cerr := ctx.Err(); cerr != nil {
			err = gxerr.Ctx(p.name+": copy out of the bounce buffer dropped", cerr)
		} else {
			err = copyWait(ctx, p.env, local, region)
		}
	}
	free(err)
	finish(err)
}

// lateAnswer waits for the answer to request id, whose operation has
// ended, for up to PeerTimeout (without one, until the answer or the
// endpoint's end). After it, the request is forgotten (a late answer is
// dropped) and the bounce buffer may go: the peer's own mapping of it
// keeps its pages for as long as it still writes.
func (p *Path) lateAnswer(ch <-chan error, id uint64) error {
	pt := p.env.Config().PeerTimeout
	if pt <= 0 {
		return <-ch
	}
	t := time.NewTimer(pt)
	defer t.Stop()
	select {
	case err := <-ch:
		return err
	case <-t.C:
		if !p.c.Forget(id) {
			return <-ch // being delivered
		}
		return gxerr.New(gxerr.Timeout, fmt.Sprintf("%s: no answer to request %d within the peer timeout (%v)", p.name, id, pt), nil)
	}
}

// request sends the Put or Get of r the peer performs against region (our
// bounce buffer) and returns the channel its outcome arrives on (the
// peer's answer, or the endpoint's failure) and the request's id. A
// request not sent when ctx ends, also while it is being written to a
// peer that does not read, is dropped (the error is ctx's).
func (p *Path) request(ctx context.Context, r *datapath.Req, region datapath.Mem) (<-chan error, uint64, error) {
	exp, ok := p.env.(Exporter)
	if !ok {
		return nil, 0, gxerr.New(gxerr.NotSupported, "the engine exports no bounce buffers", nil)
	}
	lk, err := exp.ExportKey(region.B)
	if err != nil {
		return nil, 0, err
	}
	req := wire.Request{RequestID: p.c.NewID(), Key: r.Key, Offset: 0, Length: r.Local.Len,
		Local: wire.Local{Kind: wire.LocalKey, Key: lk, Offset: region.Off}}
	var m wire.Message = &wire.Get{Request: req}
	if r.Put {
		m = &wire.Put{Request: req}
	}
	ch := make(chan error, 1)
	c := p.c
	if err := c.ExpectRequest(ctx, req.RequestID, datapath.ReplyFunc(func(f wire.Frame, err error) {
		if err == nil {
			err = c.ReplyErr(f)
			_ = f.CloseFDs()
		}
		ch <- err
	})); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			err = gxerr.Ctx(p.name+": waiting for a request slot", err)
		}
		return nil, 0, err
	}
	if h := p.t.hooks.BeforeRequest; h != nil {
		h()
	}
	if err := ctx.Err(); err != nil {
		c.Forget(req.RequestID)
		return nil, 0, gxerr.Ctx(p.name+": request dropped before it was sent", err)
	}
	// The write ends with ctx too (a peer that does not read would hold
	// the caller, and its transfer slot, for the write timeout): a unix
	// socket sends a frame whole or not at all, so the request is then
	// not sent and the endpoint stays up.
	if err := c.Conn().SendCtx(ctx, m); err != nil {
		if !c.Forget(req.RequestID) {
			<-ch // the endpoint's failure, being delivered
		}
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return nil, 0, gxerr.Ctx(p.name+": request not sent", cerr)
		}
		return nil, 0, c.SendErr(err)
	}
	return ch, req.RequestID, nil
}

// copyWait copies src to dst and waits until the copy is done (ctx drops
// it while it has not started).
func copyWait(ctx context.Context, env datapath.Env, dst, src datapath.Mem) error {
	w := env.Copy(ctx, dst, src, time.Time{})
	<-w.Done()
	return w.Err()
}

// serve performs a peer's Put or Get on one of our buffers, off the reader
// goroutine: it imports the requester's memory and copies (with the device
// DMA engine when our side is Gaudi memory).
func (p *Path) serve(put bool, r wire.Request) error {
	if r.Local.Kind != wire.LocalKey {
		return fmt.Errorf("request with local kind %d on the ipc transport", r.Local.Kind)
	}
	ok := p.c.Serve(func() wire.Message {
		if st, msg := p.serveRequest(put, r); st != wire.StatusOK {
			return wire.NewError(r.RequestID, st, msg)
		}
		return &wire.Completion{RequestID: r.RequestID, Status: wire.StatusOK}
	})
	if !ok { // the reader never blocks: refuse beyond the limit, through the writer
		return p.c.QueueReply(wire.NewError(r.RequestID, wire.StatusNoResources, "too many requests in progress"))
	}
	return nil
}

func (p *Path) serveRequest(put bool, r wire.Request) (wire.Status, string) {
	need := wire.KeyRead
	if put {
		need = wire.KeyWrite
	}
	mine, st, msg := p.env.Lookup(&r.Key, r.Offset, r.Length, need)
	if st != wire.StatusOK {
		return st, msg
	}
	if r.Local.Key.MemType != wire.MemHost {
		return wire.StatusNotSupported, "the requester's memory must be shared host memory"
	}
	if r.Local.Key.Owner != p.c.PeerHello().EngineID {
		return wire.StatusBadKey, "the requester's key is not its own"
	}
	start, err := r.Local.Key.Span(r.Local.Offset, r.Length)
	if err != nil {
		return wire.StatusOutOfRange, err.Error()
	}
	if r.Local.Key.Length > r.Length {
		// The import maps the whole allocation, whose Length the peer
		// alone vouches for: a sparse memfd of terabytes would take this
		// process's address space (and a device copy would pin it all).
		// A requester exports a bounce buffer of exactly the request's
		// size (remoteDMA).
		return wire.StatusOutOfRange, fmt.Sprintf("the requester's allocation of %d bytes is larger than the request (%d bytes)", r.Local.Key.Length, r.Length)
	}
	ctx := context.Background()
	h, err := p.importKey(ctx, time.Time{}, r.Local.Key)
	if err != nil {
		return wire.StatusNoResources, err.Error()
	}
	defer p.t.imports.Put(h)
	theirs := h.Value().mem(start, r.Length)
	if put {
		err = copyWait(ctx, p.env, mine, theirs)
	} else {
		err = copyWait(ctx, p.env, theirs, mine)
	}
	if errors.Is(err, gxerr.Freed) {
		// Our buffer was freed after the key was looked up (during the
		// import): the key is stale, as Lookup would now say.
		return wire.StatusStale, "buffer no longer exported"
	}
	if err != nil {
		return wire.StatusInternal, err.Error()
	}
	if hk := p.t.hooks.Served; hk != nil {
		hk()
	}
	if h.Value().revoked() { // the requester freed its memory during the copy
		return wire.StatusStale, "the requester's buffer was freed"
	}
	return wire.StatusOK, ""
}
