package rdmapath

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// Delegated requests. A peer buffer without an rkey is reached by a
// request naming a host region of ours, registered for the request: the
// owner moves the data with RDMA against it, then answers.
//
// The region must stay registered for as long as the owner may move data
// against it, or a late transfer would meet an access error that fails
// the endpoint. So neither the Put's deadline nor its ctx ends the request
// at once:
//
//   - the deadline resolves the operation with ErrTimeout (the buffer
//     stays held, as for every RDMA operation past its deadline);
//   - when ctx ends, nothing is dropped that has started: the request is
//     out, the owner may be moving data;
//
// in both cases the request goes on waiting for the owner's answer, for
// PeerTimeout more (Config.PeerTimeout; without one, until the answer or
// the endpoint's end). An owner that has not answered by then (alive, its
// heartbeats coming, but stuck) fails the endpoint: its queue pairs go to
// the error state, so the owner can no longer reach the region, which is
// then deregistered; the request does not hold it for ever. Only then,
// or once the owner has answered, does an operation whose ctx ended
// resolve, with the ctx's typed error (gxerr.Ctx): its memory is no
// longer touched, and the destination is undefined, as for every
// cancelled operation.

// startDelegate runs r as a delegated request, on a goroutine holding one
// of the engine's transfer slots.
func (p *Path) startDelegate(ctx context.Context, r datapath.Req, c datapath.Completer) {
	p.goAsync(ctx, r.Local, r.Deadline, c, func() error { return p.delegate(ctx, r.Put, r.Local, r.Key, r.Deadline) })
}

// delegate asks the owner of k to move the data itself, with RDMA against
// a registered host region of ours: local's own memory (host), or a host
// bounce buffer (Gaudi). It returns once the owner has answered, or can
// no longer reach the region (see above).
func (p *Path) delegate(ctx context.Context, put bool, local datapath.Mem, k wire.RemoteKey, deadline time.Time) error {
	region := local
	if local.IsGaudi() {
		b, err := p.env.AllocHost(local.Len)
		if err != nil {
			return err
		}
		defer p.env.FreeHost(b)
		region = datapath.Mem{B: b, Len: local.Len}
		if put {
			if err := p.copy(ctx, region, local); err != nil {
				return err
			}
		}
	}
	if err := p.delegateRegion(ctx, put, region, k, deadline); err != nil {
		return err
	}
	if !put && local.IsGaudi() {
		return p.copy(ctx, local, region)
	}
	return nil
}

// copy copies src to dst with the engine, dropped if ctx has ended, and
// waits for its end.
func (p *Path) copy(ctx context.Context, dst, src datapath.Mem) error {
	return p.env.Copy(ctx, dst, src, time.Time{}).Wait(context.Background())
}

// delegateRegion registers region and sends the request naming it.
func (p *Path) delegateRegion(ctx context.Context, put bool, region datapath.Mem, k wire.RemoteKey, deadline time.Time) error {
	if err := ctx.Err(); err != nil { // not sent: nothing to wait for
		return gxerr.Ctx(p.c.Name()+": delegated RDMA request not sent", err)
	}
	// The owner reaches this region by RDMA with the rkey it is sent: a
	// registration of its own, not the cache's, deregistered once the
	// request is over, so that the peer's access ends with it, and
	// granting only what serving the request takes (regionAccess).
	register := p.t.registerHook
	if register == nil {
		register = p.t.nics[0].pd.Register
	}
	mr, err := register(region.Host(), regionAccess(put))
	if err != nil {
		return gxerr.New(gxerr.NotSupported, "RDMA registration of local memory", err)
	}
	defer mr.Close()
	req := wire.Request{RequestID: p.c.NewID(), Key: k, Length: region.Len,
		Local: wire.Local{Kind: wire.LocalRDMA, Addr: mr.Addr(), RKey: mr.RKey()}}
	return p.ask(ctx, put, req, deadline)
}

// regionAccess is what the owner of a delegated request may do to the
// region it names: a Put's owner reads it (RDMA READ), and nothing more:
// the region is the Put's source, the caller's own memory for host
// memory, which a hostile owner must not be able to write; a Get's owner
// writes it, then reads a few bytes of it back (readBack, the fence).
func regionAccess(put bool) rdma.Access {
	if put {
		return rdma.AccessRemoteRead
	}
	return rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteRead
}

// ask sends a delegated request and waits for the owner's answer: past
// the end of ctx or the deadline, for PeerTimeout more, after which the
// endpoint fails (see the top of this file). The region the request
// names is out of the owner's reach when it returns.
func (p *Path) ask(ctx context.Context, put bool, req wire.Request, deadline time.Time) error {
	var m wire.Message = &wire.Get{Request: req}
	if put {
		m = &wire.Put{Request: req}
	}
	// Within the endpoint's requests outstanding (the owner refuses
	// beyond): wait for a slot while ctx lasts.
	release, err := p.c.RequestSlot(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return gxerr.Ctx(p.c.Name()+": waiting for a request slot", ctx.Err())
		}
		return err
	}
	defer release()
	w := p.newAnswerWait(ctx, deadline)
	f, err := p.c.RoundTrip(w.ctx, req.RequestID, m)
	gaveUp := w.stop()
	if err == nil {
		defer f.CloseFDs()
		err = p.c.ReplyErr(f)
	} else if gaveUp && p.c.Err() == nil {
		why := "its deadline"
		if ctx.Err() != nil {
			why = "the end of its context"
		}
		p.c.Fail(p.c.PeerErr(fmt.Sprintf("no answer to delegated RDMA request %d within PeerTimeout (%v) after %s", req.RequestID, w.pt, why), nil))
	}
	if err != nil && p.c.Err() != nil {
		// The owner must not reach the region past its deregistration:
		// the endpoint failed (or its connection did), its queue pairs go
		// to the error state (Failed does it too; here before the
		// caller's mr.Close).
		p.setError()
		err = p.c.Err()
	}
	switch {
	case ctx.Err() != nil:
		return gxerr.Ctx(p.c.Name()+": delegated RDMA request", ctx.Err())
	case gaveUp && err != nil:
		return gxerr.New(gxerr.Timeout, p.c.Name()+": delegated RDMA request", err)
	}
	return err
}

// answerWait is the context a delegated request waits for its answer
// with: it ends PeerTimeout after the request's ctx or deadline ends
// (never without a PeerTimeout).
type answerWait struct {
	ctx    context.Context
	cancel context.CancelFunc
	pt     time.Duration

	mu      sync.Mutex
	timer   *time.Timer // PeerTimeout running (armed)
	stopped bool
	unCtx   func() bool
	dl      *time.Timer
}

func (p *Path) newAnswerWait(ctx context.Context, deadline time.Time) *answerWait {
	w := &answerWait{ctx: context.Background(), pt: p.env.Config().PeerTimeout}
	if w.pt <= 0 {
		return w
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.unCtx = context.AfterFunc(ctx, w.arm)
	if !deadline.IsZero() {
		w.dl = time.AfterFunc(time.Until(deadline), w.arm)
	}
	return w
}

// arm starts the PeerTimeout (once).
func (w *answerWait) arm() {
	w.mu.Lock()
	if !w.stopped && w.timer == nil {
		w.timer = time.AfterFunc(w.pt, w.cancel)
	}
	w.mu.Unlock()
}

// stop ends the timers; it reports whether the PeerTimeout ran out.
func (w *answerWait) stop() bool {
	if w.cancel == nil {
		return false
	}
	w.unCtx()
	if w.dl != nil {
		w.dl.Stop()
	}
	w.mu.Lock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	gaveUp := w.ctx.Err() != nil
	w.cancel()
	return gaveUp
}

// serve performs a peer's LocalRDMA request on one of our buffers, off
// the reader goroutine, and answers it.
func (p *Path) serve(put bool, r wire.Request) error {
	if p.c.Ours(r.RequestID) {
		return fmt.Errorf("request id %d of our parity", r.RequestID)
	}
	p.c.MarkActive()
	ok := p.c.Serve(func() wire.Message {
		if h := p.t.serveHook.Load(); h != nil {
			(*h)() // tests: a stuck owner
		}
		var rep wire.Message = &wire.Completion{RequestID: r.RequestID, Status: wire.StatusOK}
		if st, msg := p.serveRequest(put, r); st != wire.StatusOK {
			rep = wire.NewError(r.RequestID, st, msg)
		} else {
			p.servedRDMA.Add(1)
		}
		if p.c.Err() != nil {
			return nil
		}
		return rep
	})
	if !ok {
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
	if r.Length == 0 {
		return wire.StatusOK, ""
	}
	if err := mine.B.Acquire(); err != nil {
		return wire.StatusStale, "buffer no longer exported"
	}
	defer mine.B.Release()
	// A Put reads the requester's region into our memory; a Get writes it.
	res := newResult()
	p.move(context.Background(), !put, false, mine, rdma.RemoteAddr{Addr: r.Local.Addr, RKey: r.Local.RKey}, nil, time.Time{}, res)
	if err := res.wait(); err != nil {
		return wire.StatusInternal, err.Error()
	}
	if !put {
		// The requester reads its region once answered: the writes above
		// (one queue pair: the region has one rkey) must be in its memory
		// first (fence.go).
		if err := p.readBack(p.conns[0], rdma.RemoteAddr{Addr: r.Local.Addr, RKey: r.Local.RKey}, min(r.Length, fenceRead)); err != nil {
			return wire.StatusInternal, err.Error()
		}
	}
	return wire.StatusOK, ""
}
