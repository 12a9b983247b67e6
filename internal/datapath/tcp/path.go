package tcp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// path is the TCP data path of one endpoint (one connection: a lane has
// a path of its own).
type path struct {
	t         *Transport
	c         datapath.Ctrl
	env       datapath.Env
	cancelCap bool // the peer understands wire.Cancel
	listCap   bool // the peer serves lists (listCaps)

	mu      sync.Mutex
	inbound map[uint64]*inbound // transfers landing, by request id
	serving map[uint64]*atomic.Bool
	failed  error
	lastID  atomic.Uint64 // the highest request id this path issued
	cur     routed        // reader only: the Data frame being landed
	drop    []byte        // reader only: where bytes of refused list entries are dropped

	served, bytesOut, bytesIn atomic.Uint64
	// in and out hand out the staging buffers of Gaudi memory landing
	// (the reader) and leaving (sendMem) through this connection.
	in, out *stager

	lanes  []lane // the extra connections of a dialed endpoint (set by Connect, openLanes)
	parent *path  // a lane's endpoint
	// opening: openLanes ran, the endpoint not started yet (p.mu);
	// dropped: this lane failed then, and Started drops it (its
	// parent's mu).
	opening, dropped bool
	// laneSnap is the paths of lanes, for Start to pick one without a
	// lock; outstanding counts this connection's requests in progress.
	laneSnap    atomic.Pointer[[]*path]
	outstanding atomic.Int32
	// staging counts the Data frames whose staging DMAs into local Gaudi
	// memory run (see InFlight).
	staging atomic.Int32
	// ctxw watches the contexts of this connection's requests.
	ctxw ctxWatch
	// puts: host Puts waiting for the connection, sent in order by one
	// task at a time (drainPuts, bound once in drain: a method value made
	// at each start would cost an allocation).
	puts  putQueue
	drain func()
}

var _ datapath.Path = (*path)(nil)

func newPath(t *Transport, c datapath.Ctrl) *path {
	p := &path{t: t, c: c, env: t.env, inbound: map[uint64]*inbound{}, serving: map[uint64]*atomic.Bool{},
		in: newStager(t, t.in), out: newStager(t, t.out)}
	p.drain = p.drainPuts
	if conn := c.Conn(); conn != nil {
		conn.SetDataSinkV(p.routeV)
	}
	if h := c.PeerHello(); h != nil {
		p.cancelCap = h.Caps&wire.CapCancel != 0
		p.listCap = h.Caps&listCaps == listCaps
	}
	return p
}

func (p *path) Kind() datapath.Kind { return datapath.KindTCP }

// Handle serves the peer's Puts, Gets and lists whose data travels in
// Data frames, and its Cancels.
func (p *path) Handle(f *wire.Frame, m wire.Message) (bool, error) {
	switch m := m.(type) {
	case *wire.Put:
		p.c.MarkActive()
		if m.Local.Kind != wire.LocalInline {
			return true, fmt.Errorf("request with local kind %d on the tcp transport", m.Local.Kind)
		}
		return true, p.servePut(&m.Request)
	case *wire.Get:
		p.c.MarkActive()
		if m.Local.Kind != wire.LocalInline {
			return true, fmt.Errorf("request with local kind %d on the tcp transport", m.Local.Kind)
		}
		return true, p.serveGet(m.Request)
	case *wire.PutList:
		p.c.MarkActive()
		return true, p.servePutList(&m.ListRequest)
	case *wire.GetList:
		p.c.MarkActive()
		return true, p.serveGetList(&m.ListRequest)
	case *wire.Cancel:
		return true, p.serveCancel(m)
	}
	return false, nil
}

// Sink is the reader's DataSink (the connection routes with routeV,
// which lands frames spanning several entries of a list).
func (p *path) Sink() wire.DataSink { return p.route }

// Tick has nothing to do: the endpoint's writer sends the heartbeats.
func (p *path) Tick() {}

// Failed records the endpoint's failure and fails its lanes (or the
// endpoint it is a lane of, unless that one has not started yet:
// laneFailed).
func (p *path) Failed(err error) {
	p.mu.Lock()
	p.failed = err
	for _, s := range p.serving {
		s.Store(true) // the connection is gone: stop sending
	}
	p.mu.Unlock()
	// On a goroutine of its own: Failed runs inside the endpoint's
	// failure, which must not wait for another endpoint's (two lanes
	// failing at once would each wait for the other). An endpoint being
	// closed leaves its lanes to Closed, which closes them as it was (a
	// Bye to the peer), once its reader has ended.
	var others []datapath.Ctrl
	closed := errors.Is(err, gxerr.Closed)
	if !closed {
		others = p.laneCtrls()
	}
	// A lane closed (by its endpoint's end, or the engine's Close, which
	// closes the endpoint itself) does not fail its endpoint: that would
	// cut the endpoint's connection before its own Close sent a Bye.
	if p.parent != nil && !closed && p.parent.laneFailed(p, err) {
		others = append(others, p.parent.c)
	}
	if len(others) > 0 {
		p.env.Go(func() {
			for _, c := range others {
				c.Fail(err)
			}
		})
	}
}

// Closed finishes what the reader left (the frame it was landing, the
// transfers still landing) and closes the lanes (failing them first with
// err, the endpoint's end, unless the endpoint was closed).
func (p *path) Closed(err error) {
	if err == nil {
		err = gxerr.New(gxerr.Closed, "endpoint closed", nil)
	}
	p.abortRouting()
	p.ctxw.close()
	p.cancelInbound(err)
	p.closeLanes(err)
	p.in.Close()
	p.out.Close()
}

// Stats adds the counters of the path and its lanes.
func (p *path) Stats(s *datapath.Stats) {
	lanes := p.laneList()
	s.Lanes += 1 + len(lanes)
	for _, q := range append([]*path{p}, lanes...) {
		s.Served += q.served.Load()
		s.BytesOut += q.bytesOut.Load()
		s.BytesIn += q.bytesIn.Load()
	}
}

// Bind is not offered over TCP.
func (p *path) Bind(context.Context, datapath.Mem, wire.RemoteKey, *wire.RemoteKey, time.Time) (datapath.Bound, error) {
	return nil, gxerr.New(gxerr.NotSupported, "bindings need memory shared on one node (a \"unix\" endpoint) or an RDMA endpoint; this one is tcp", nil)
}

// newID issues a request id and remembers it as issued (Data frames for
// our ids up to it are answers to Gets we may have given up on).
func (p *path) newID() uint64 {
	id := p.c.NewID()
	for {
		last := p.lastID.Load()
		if id <= last || p.lastID.CompareAndSwap(last, id) {
			return id
		}
	}
}

// issued reports whether id is one of ours, already issued.
func (p *path) issued(id uint64) bool { return p.c.Ours(id) && id <= p.lastID.Load() }

func (p *path) addInbound(in *inbound) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed != nil {
		return p.failed
	}
	// MaxInbound bounds the peer's transfers; this side's Gets (bounded
	// by the request slots) are never refused for them, whatever the
	// peer keeps open.
	if !p.c.Ours(in.id) && len(p.inbound) >= MaxInbound {
		return fmt.Errorf("more than %d transfers in progress", MaxInbound)
	}
	if _, dup := p.inbound[in.id]; dup {
		return fmt.Errorf("request id %d reused while in progress", in.id)
	}
	p.inbound[in.id] = in
	return nil
}

func (p *path) removeInbound(id uint64) *inbound {
	p.mu.Lock()
	in := p.inbound[id]
	delete(p.inbound, id)
	p.mu.Unlock()
	return in
}

// InFlight reports whether a copy into local memory runs on this
// connection: the reader landing a Data frame, or its staging DMAs (the
// endpoint's control channel asks, for a listener that looks for an
// endpoint to close). A transfer waiting for its next Data frame is not
// in flight: a peer that stops sending it is idle.
func (p *path) InFlight() bool {
	if p.staging.Load() > 0 {
		return true
	}
	p.mu.Lock()
	ins := make([]*inbound, 0, len(p.inbound))
	for _, in := range p.inbound {
		ins = append(ins, in)
	}
	p.mu.Unlock()
	for _, in := range ins {
		in.mu.Lock()
		busy := in.routing || in.dmas > 0
		in.mu.Unlock()
		if busy {
			return true
		}
	}
	return false
}

// cancelInbound cancels every transfer still landing (the connection is
// gone).
func (p *path) cancelInbound(err error) {
	p.mu.Lock()
	ins := make([]*inbound, 0, len(p.inbound))
	for _, in := range p.inbound {
		ins = append(ins, in)
	}
	clear(p.inbound)
	p.mu.Unlock()
	for _, in := range ins {
		in.cancel(err)
	}
}

// sendErr maps a failure to send on the connection.
func (p *path) sendErr(err error) error {
	if err == nil || errors.Is(err, errSourceFailed) {
		return err
	}
	return p.c.SendErr(err)
}
