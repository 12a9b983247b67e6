package rdmapath

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// Path is an RDMA endpoint's data path: its queue pairs, one per NIC
// both sides have (conns[0] on the first NIC, the one Gaudi memory is
// registered on and bindings use).
type Path struct {
	t     *Transport
	c     datapath.Ctrl
	env   datapath.Env
	conns []*conn

	// Which path each Put and Get this side requested took, and the
	// peer's delegated requests this side performed.
	zeroCopy, staged, delegated, servedRDMA atomic.Uint64

	bounds bounds // the bindings left open (bounds.go)
}

var _ datapath.Path = (*Path)(nil)

// Kind is datapath.KindRDMA.
func (p *Path) Kind() datapath.Kind { return datapath.KindRDMA }

// Start runs a Put or Get: straight between the two memories when the
// key carries an rkey (local Gaudi memory without a DMA-BUF region staged
// through host buffers), else by a request the owner performs against a
// registered host region of ours (delegate.go).
func (p *Path) Start(ctx context.Context, r datapath.Req, c datapath.Completer) {
	k := r.Key
	if k.RKey != 0 {
		start, err := k.Span(0, k.Len)
		if err != nil {
			c.Complete(0, gxerr.New(gxerr.Invalid, "remote key view", err))
			return
		}
		if p.move(ctx, r.Put, true, r.Local, rdma.RemoteAddr{Addr: k.Base + start, RKey: k.RKey}, k.NICRKeys[:], r.Deadline, c) {
			p.staged.Add(1)
		} else {
			p.zeroCopy.Add(1)
		}
		return
	}
	p.delegated.Add(1)
	p.startDelegate(ctx, r, c)
}

// Handle serves the peer's requests naming a region of its own
// (wire.LocalRDMA).
func (p *Path) Handle(f *wire.Frame, m wire.Message) (bool, error) {
	switch m := m.(type) {
	case *wire.Put:
		if m.Local.Kind == wire.LocalRDMA {
			return true, p.serve(true, m.Request)
		}
	case *wire.Get:
		if m.Local.Kind == wire.LocalRDMA {
			return true, p.serve(false, m.Request)
		}
	}
	return false, nil
}

// Sink is nil: no data travels on the control connection.
func (p *Path) Sink() wire.DataSink { return nil }

// Landed is never called (no sink).
func (p *Path) Landed() {}

// Tick fails the endpoint if one of its queue pairs is in the error state
// (with nothing in flight, no completion would tell): operations waiting
// on the peer then end at once.
func (p *Path) Tick() {
	if p.c.Err() != nil {
		return
	}
	for _, cn := range p.conns {
		if st, err := cn.qp.State(); err == nil && st == rdma.QPStateError {
			p.c.Fail(p.c.PeerErr(fmt.Sprintf("RDMA queue pair on %s in the error state", cn.n.dev.Name()), nil))
			return
		}
	}
}

// Failed moves every queue pair to the error state: what is in flight
// completes with flush errors, and the peer can no longer reach our
// regions through them.
func (p *Path) Failed(error) { p.setError() }

func (p *Path) setError() {
	for _, cn := range p.conns {
		_ = cn.qp.SetError()
	}
}

// Closed destroys the queue pairs once their outstanding work requests
// have completed (flushed).
func (p *Path) Closed(err error) {
	for _, cn := range p.conns {
		cn.close()
	}
	p.bounds.closeAll(err)
}

// Stats adds the path's counters.
func (p *Path) Stats(s *datapath.Stats) {
	s.ZeroCopy += p.zeroCopy.Load()
	s.Staged += p.staged.Load()
	s.Delegated += p.delegated.Load()
	s.ServedRDMA += p.servedRDMA.Load()
	s.Served += p.servedRDMA.Load()
	for _, cn := range p.conns {
		s.NICWRs = append(s.NICWRs, cn.wrs.Load())
	}
}

// post posts wrs on the queue pair cn, in order, taking a send-queue
// credit for each (waiting while the queue is full, until ctx ends or the
// endpoint does). It posts in waves of as many as it holds credits for,
// and never waits for a credit while holding others: a chain longer than
// the queue (a part of over maxSend work requests) could otherwise never
// post, and two long chains could each hold part of the queue waiting
// for the rest. It returns how many were posted (wrs[n:] were not, and
// their Completers will not be called). A caller holding the CQ
// (rdma.CQ.Hold) passes it as held: the hold is let go while it waits for
// credits, which only completions return.
func (p *Path) post(ctx context.Context, cn *conn, wrs []rdma.WR, held *rdma.CQ) (int, error) {
	posted := 0
	for posted < len(wrs) {
		k, err := p.takeCredits(ctx, cn, len(wrs)-posted, held)
		if err != nil {
			return posted, err
		}
		n, err := cn.qp.Post(wrs[posted : posted+k])
		cn.wrs.Add(uint64(n))
		if n < k {
			cn.put(k - n)
		}
		posted += n
		if err != nil {
			return posted, p.postErr(err)
		}
	}
	return posted, nil
}

// postPrepared is post of one prepared work request.
func (p *Path) postPrepared(ctx context.Context, cn *conn, w *rdma.Prepared, held *rdma.CQ) error {
	if _, err := p.takeCredits(ctx, cn, 1, held); err != nil {
		return err
	}
	if err := cn.qp.PostPrepared(w); err != nil {
		cn.put(1)
		return p.postErr(err)
	}
	cn.wrs.Add(1)
	return nil
}

// takeCredits takes between 1 and want send credits of cn, and as many
// entries of its NIC's CQ (which every endpoint shares): the first of
// each waiting for it if none is free (see post), the others only if
// free. The CQ full is a wait, as the queue pair's send queue full is,
// not a failure: the post of an endpoint within its own limits is held
// back (until ctx ends), never refused because others fill the CQ.
func (p *Path) takeCredits(ctx context.Context, cn *conn, want int, held *rdma.CQ) (int, error) {
	if err := p.waitCredit(ctx, &cn.credits, held, "RDMA send credits"); err != nil {
		return 0, err
	}
	k := 1
	for k < want && cn.credits.tryTake() {
		k++
	}
	if err := p.waitCredit(ctx, &cn.n.slots, held, "room in the RDMA completion queue"); err != nil {
		cn.credits.put(k)
		return 0, err
	}
	s := 1
	for s < k && cn.n.slots.tryTake() {
		s++
	}
	if s < k {
		cn.credits.put(k - s)
	}
	return s, nil
}

// waitCredit takes a credit of c, waiting for one if none is free (the
// CQ's hold let go meanwhile), until ctx ends or the endpoint does.
func (p *Path) waitCredit(ctx context.Context, c *sendCredits, held *rdma.CQ, what string) error {
	if c.tryTake() {
		return nil
	}
	if held != nil {
		held.Release()
	}
	err := c.take(ctx, p.c.Done())
	if held != nil {
		held.Hold()
	}
	switch {
	case err == nil:
		return nil
	case err == errCreditsDone:
		return p.c.Err()
	}
	return gxerr.Ctx(p.c.Name()+": waiting for "+what, err)
}

// postErr is the error of a failed rdma.QP.Post.
func (p *Path) postErr(err error) error {
	if f := p.c.Err(); f != nil {
		return f
	}
	switch {
	case errors.Is(err, rdma.ErrClosed):
		return gxerr.New(gxerr.Closed, p.c.Name()+": RDMA queue pair closed", err)
	case errors.Is(err, rdma.ErrQueueFull):
		return gxerr.New(gxerr.QueueFull, p.c.Name()+": RDMA", err)
	}
	return p.c.PeerErr("RDMA post", err)
}

// wrFailed is the error of a failed work request: the queue pair is in
// the error state, so the endpoint fails (once) with ErrPeer naming the
// peer, and every operation still in flight on it ends with that error.
func (p *Path) wrFailed(op rdma.OpKind, err error) error {
	if f := p.c.Err(); f != nil {
		return f
	}
	p.c.Fail(p.c.PeerErr(op.String()+" failed", err))
	return p.c.Err()
}

// nicRKeys appends to rkeys (the peer region's rkey on its first NIC) the
// region's rkeys on the further NICs that a transfer of n bytes spreads
// over: none below SliceMin, else those both sides have (nicRKeys[i] is
// the rkey on the peer's NIC i+1, 0 where it has none).
func (p *Path) nicRKeys(rkeys []uint32, n uint64, nicRKeys []uint32) []uint32 {
	return appendNICRKeys(rkeys, n, nicRKeys, len(p.conns))
}

func appendNICRKeys(rkeys []uint32, n uint64, nicRKeys []uint32, conns int) []uint32 {
	if n < SliceMin {
		return rkeys
	}
	for i, k := range nicRKeys {
		if k == 0 || i+1 >= conns {
			break
		}
		rkeys = append(rkeys, k)
	}
	return rkeys
}
