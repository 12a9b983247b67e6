package rdmapath

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// conn is an endpoint's queue pair on one NIC.
type conn struct {
	n         *nic
	qp        *rdma.QP
	maxInline int         // bytes a write may carry in its work request
	credits   sendCredits // work requests in flight (send queue depth)
	once      sync.Once
	wrs       atomic.Uint64 // work requests posted on this NIC
	fence     fenceState    // writes since the last fence (fence.go)
}

// newConn creates a queue pair taking MaxInline bytes of inline data in
// its writes (small writes then need no DMA read of their source), or
// none where the device refuses that.
func (r *nic) newConn() (*conn, error) {
	cfg := rdma.QPConfig{
		SendCQ: r.cq, MaxSend: maxSend, MaxRecv: 1, MaxSendSGE: 1, MaxRecvSGE: 1,
		Port: r.port, GIDIndex: r.gidIndex, MaxInline: MaxInline,
	}
	qp, err := r.pd.NewQP(cfg)
	if err != nil {
		cfg.MaxInline = 0
		if qp, err = r.pd.NewQP(cfg); err != nil {
			return nil, err
		}
	}
	r.qps.Add(1)
	r.ownMu.Lock()
	r.own[qp.QPN()] = qp
	r.ownMu.Unlock()
	return &conn{n: r, qp: qp, maxInline: cfg.MaxInline, credits: newSendCredits(maxSend)}, nil
}

// ownQP is the queue pair open on this NIC that ep names (an address of
// its port, the QP number of one of its conns), or nil.
func (r *nic) ownQP(ep rdma.Endpoint) *rdma.QP {
	local := ep.GID.IsZero() && ep.LID != 0 && ep.LID == r.portInfo.LID
	for _, g := range r.gids {
		local = local || (!ep.GID.IsZero() && ep.GID == g)
	}
	if !local {
		return nil
	}
	r.ownMu.Lock()
	defer r.ownMu.Unlock()
	return r.own[ep.QPN]
}

// put gives back the send credits and CQ entries of n work requests
// (completed, or not posted).
func (c *conn) put(n int) {
	c.credits.put(n)
	c.n.slots.put(n)
}

// close destroys the queue pair once its outstanding work requests have
// completed (flushed).
func (c *conn) close() {
	c.once.Do(func() {
		_ = c.qp.Close()
		c.n.ownMu.Lock()
		delete(c.n.own, c.qp.QPN())
		c.n.ownMu.Unlock()
		c.n.qps.Done()
	})
}

func toWireEndpoint(ep rdma.Endpoint, nic, nics int) wire.RDMAConnect {
	return wire.RDMAConnect{QPN: ep.QPN, PSN: ep.PSN, LID: ep.LID, MTU: uint8(ep.MTU), NIC: uint8(nic), NICs: uint8(nics), GID: ep.GID}
}

func fromWireEndpoint(m *wire.RDMAConnect) rdma.Endpoint {
	return rdma.Endpoint{QPN: m.QPN, PSN: m.PSN, LID: m.LID, MTU: rdma.MTU(m.MTU), GID: m.GID}
}

// Connect brings up the endpoint's queue pairs over the control
// connection, right after the Hello exchange: the dialer sends an
// RDMAConnect for each of its NICs, the acceptor connects a queue pair on
// each NIC both sides have to the dialer's of the same index and answers
// with those, and the dialer connects the same ones (closing the rest).
func (t *Transport) Connect(ctx context.Context, c datapath.Ctrl) (datapath.Path, error) {
	conns, err := t.connect(ctx, c.Conn(), c.Dialer())
	if err != nil {
		return nil, err
	}
	return &Path{t: t, c: c, env: t.env, conns: conns}, nil
}

func (t *Transport) connect(ctx context.Context, wc *wire.Conn, dialer bool) (_ []*conn, err error) {
	refuse := func(err error) error {
		if !dialer {
			_ = wc.Send(wire.NewError(0, wire.StatusNoResources, "RDMA queue pair: "+err.Error()))
		}
		return fmt.Errorf("RDMA queue pair: %w", err)
	}
	var conns []*conn
	defer func() {
		if err != nil {
			for _, c := range conns {
				c.close()
			}
		}
	}()
	// open creates queue pairs on the first n NICs.
	open := func(n int) error {
		for _, r := range t.nics[:n] {
			c, err := r.newConn()
			if err != nil {
				return err
			}
			conns = append(conns, c)
		}
		return nil
	}
	send := func() error {
		for i, c := range conns {
			m := toWireEndpoint(c.qp.Endpoint(), i, len(conns))
			if err := wc.Send(&m); err != nil {
				return err
			}
		}
		return nil
	}
	if dialer {
		if err := open(len(t.nics)); err != nil {
			return nil, refuse(err)
		}
		if err := send(); err != nil {
			return nil, err
		}
	}
	most := wire.MaxNICs // the dialer's offer
	if dialer {
		most = len(conns) // the answer names as many NICs at most
	}
	peer, err := recvConnects(ctx, wc, most)
	if err != nil {
		return nil, err
	}
	if dialer {
		for _, c := range conns[len(peer):] {
			c.close()
		}
		conns = conns[:len(peer)]
	} else if err := open(min(len(peer), len(t.nics))); err != nil {
		return nil, refuse(err)
	}
	for i, c := range conns {
		ep := fromWireEndpoint(&peer[i])
		if err := t.checkPeer(c, ep); err != nil {
			if !dialer {
				_ = wc.Send(wire.NewError(0, wire.StatusRefused, err.Error()))
			}
			return nil, err
		}
		if err := c.qp.Connect(ep); err != nil {
			return nil, refuse(err)
		}
	}
	if !dialer {
		if err := send(); err != nil {
			return nil, err
		}
	}
	return conns, nil
}

// checkPeer refuses, with ErrPeer, a peer's endpoint (wire.RDMAConnect
// checked its fields' ranges) that the queue pair of c cannot be
// connected to: the special QP 1 (GSI); no GID on RoCE (where a LID
// routes nothing); c's queue pair itself, or a queue pair of this side
// connected to another: a peer could else aim this side's RDMA at its
// own memory, needing no RDMA of its own. A queue pair of this side not
// yet connected, or connected to c's, is the other end of an endpoint
// this engine dialed to itself.
func (t *Transport) checkPeer(c *conn, ep rdma.Endpoint) error {
	bad := func(why string) error {
		return gxerr.New(gxerr.Peer, fmt.Sprintf("RDMA: the peer's endpoint (QPN %#x, GID %v, LID %d) %s", ep.QPN, ep.GID, ep.LID, why), nil)
	}
	switch {
	case ep.QPN == 1:
		return bad("names QP 1 (GSI)")
	case ep.GID.IsZero() && c.n.portInfo.LinkLayer == rdma.LinkLayerEthernet:
		return bad("has no GID on RoCE")
	}
	me := c.qp.Endpoint()
	for _, n := range t.nics {
		q := n.ownQP(ep)
		if q == nil {
			continue
		}
		if q == c.qp {
			return bad("names the queue pair being connected")
		}
		if r := q.Remote(); r.QPN != 0 && (r.QPN != me.QPN || r.GID != me.GID) {
			return bad("names a queue pair of this side connected to another")
		}
	}
	return nil
}

// recvConnects receives the peer's RDMAConnect messages: one per NIC,
// in order, all naming the same count, most at most (or the peer's
// error). Any other sequence is malformed (wire.ErrMalformed).
func recvConnects(ctx context.Context, wc *wire.Conn, most int) ([]wire.RDMAConnect, error) {
	var out []wire.RDMAConnect
	for {
		f, err := wc.Recv(ctx)
		if err != nil {
			return nil, err
		}
		var m wire.RDMAConnect
		if err := f.DecodeOrError(&m); err != nil {
			return nil, err
		}
		if err := checkConnect(out, &m, most); err != nil {
			return nil, err
		}
		out = append(out, m)
		if len(out) == int(m.NICs) {
			return out, nil
		}
	}
}

// checkConnect refuses an RDMAConnect out of order (got: those received
// before it), or naming more than most NICs, as malformed.
func checkConnect(got []wire.RDMAConnect, m *wire.RDMAConnect, most int) error {
	switch {
	case int(m.NICs) > most:
		return fmt.Errorf("%w: RDMA: the peer's RDMAConnect names %d NICs, %d offered", wire.ErrMalformed, m.NICs, most)
	case int(m.NIC) != len(got) || (len(got) > 0 && m.NICs != got[0].NICs):
		return fmt.Errorf("%w: RDMA: the peer's RDMAConnect for NIC %d of %d came after %d", wire.ErrMalformed, m.NIC, m.NICs, len(got))
	}
	return nil
}
