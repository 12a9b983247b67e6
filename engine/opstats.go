package engine

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/copier"
	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
)

// ErrorCount is how many operations ended with errors of one kind.
type ErrorCount struct {
	// Kind names the error kind: "peer" for ErrPeer, "timeout" for
	// ErrTimeout, "queue_full" for ErrQueueFull and so on (the snake-case
	// name of the Err variable), "other" for errors of no engine kind.
	Kind  string
	Count uint64
}

// LatencyBucket is one bucket of a cumulative latency histogram.
type LatencyBucket struct {
	UpperBound time.Duration // latencies below this
	Count      uint64        // how many latencies were below UpperBound (cumulative)
}

// OpStats count Puts and Gets as they end (those that passed the checks
// Put and Get make before they start).
type OpStats struct {
	Completed, Failed uint64
	Bytes             uint64       // bytes of completed operations
	Errors            []ErrorCount // Failed by kind, one entry per kind (zeros included)
	Latency           Latency      // Put/Get call to completion
}

// TransportStats are the engine-wide counters of one transport: its live
// endpoints and the Puts and Gets of every endpoint it ever had.
type TransportStats struct {
	Transport TransportKind
	Endpoints int // live endpoints
	Ops       OpStats
}

// Latency buckets reported: powers of two from 1.024 µs to about 34 s.
const (
	latMinExp = 10
	latMaxExp = 35
)

// opCounters count the Puts and Gets of one endpoint.
type opCounters struct {
	completed, failed, bytes atomic.Uint64
	errs                     gxerr.KindCounters
}

func (c *opCounters) record(n uint64, err error) {
	if err != nil {
		c.failed.Add(1)
		c.errs.Add(err)
	} else {
		c.completed.Add(1)
		c.bytes.Add(n)
	}
}

// recordOK records n operations of bytes in all that succeeded.
func (c *opCounters) recordOK(n, bytes uint64) {
	c.completed.Add(n)
	c.bytes.Add(bytes)
}

func (c *opCounters) snapshot() OpStats {
	return OpStats{Completed: c.completed.Load(), Failed: c.failed.Load(), Bytes: c.bytes.Load(), Errors: errorCounts(&c.errs)}
}

// numTransportKinds bounds the datapath.Kind values (auto, tcp, rdma,
// ipc, pipe).
const numTransportKinds = 5

// transportCounters count the Puts and Gets of one transport's
// endpoints, with their latencies.
type transportCounters struct {
	opCounters
	lat copier.LatencyHist
}

func (c *transportCounters) record(n uint64, d time.Duration, err error) {
	c.opCounters.record(n, err)
	c.lat.Add(d)
}

// recordOK records n operations of bytes in all that succeeded, each
// after d.
func (c *transportCounters) recordOK(n, bytes uint64, d time.Duration) {
	c.opCounters.recordOK(n, bytes)
	c.lat.AddN(d, n)
}

func (c *transportCounters) snapshot() OpStats {
	s := c.opCounters.snapshot()
	s.Latency = latencyOf(&c.lat)
	return s
}

func errorCounts(c *gxerr.KindCounters) []ErrorCount {
	out := make([]ErrorCount, gxerr.NumKinds)
	for k := range out {
		out[k] = ErrorCount{Kind: gxerr.KindName(k), Count: c.Load(k)}
	}
	return out
}

// latencyOf summarises h: quantiles, maximum, sum and log2 buckets.
func latencyOf(h *copier.LatencyHist) Latency {
	var l Latency
	l.P50, l.Count = h.Quantile(0.50)
	l.P90, _ = h.Quantile(0.90)
	l.P99, _ = h.Quantile(0.99)
	l.Max, l.Sum = h.Max(), h.Sum()
	counts, total := h.Log2()
	l.Count = total
	for e := latMinExp; e <= latMaxExp; e++ {
		l.Buckets = append(l.Buckets, LatencyBucket{UpperBound: time.Duration(1) << e, Count: counts[e-1]})
	}
	return l
}

// epOp is the future of an endpoint's Put or Get and the completer its
// data path resolves: it counts the operation (once) before the future
// resolves, so a caller that saw the future done sees it counted.
type epOp struct {
	Future
	ep    *Endpoint
	n     uint64
	start time.Duration // monotonic, since clockBase (opClock)
	once  atomic.Bool
}

// clockBase is the origin of opClock.
var clockBase = time.Now()

// opClock reads the monotonic clock: one clock read where time.Now makes
// two (the wall clock too), on every Put and Get.
func opClock() time.Duration { return time.Since(clockBase) }

func (o *epOp) count(err error) {
	if !o.once.CompareAndSwap(false, true) {
		return
	}
	d := opClock() - o.start
	o.ep.ops.record(o.n, err)
	o.ep.e.transportOps(o.ep.path.Kind()).record(o.n, d, err)
}

// Complete implements datapath.Completer.
func (o *epOp) Complete(idx int, err error) {
	o.count(err)
	o.f.Complete(idx, err)
}

// CompleteAll implements datapath.Completer.
func (o *epOp) CompleteAll(err error) {
	o.count(err)
	o.f.CompleteAll(err)
}

var _ datapath.Completer = (*epOp)(nil)

// transportOps returns the counters of transport k.
func (e *Engine) transportOps(k datapath.Kind) *transportCounters {
	if int(k) < len(e.epOps) {
		return &e.epOps[k]
	}
	return &e.epOps[0]
}

// EndpointStats returns the counters of every live endpoint (Peer names
// each one's peer; a TCP endpoint's extra connections, its lanes, are
// part of it), in no particular order. What closed endpoints counted is
// in ClosedEndpointStats.
func (e *Engine) EndpointStats() []EndpointStats {
	if e.invalid() {
		return nil
	}
	e.epMu.Lock()
	eps := make([]*Endpoint, 0, len(e.endpoints))
	for ep := range e.endpoints {
		if !ep.lane {
			eps = append(eps, ep)
		}
	}
	e.epMu.Unlock()
	out := make([]EndpointStats, 0, len(eps))
	for _, ep := range eps {
		out = append(out, ep.Stats())
	}
	return out
}

// closedEndpoints sums the counters of a transport's closed endpoints.
type closedEndpoints struct {
	n uint64 // endpoints summed
	s EndpointStats
}

func (c *closedEndpoints) add(s EndpointStats) {
	t := &c.s
	c.n++
	t.Puts += s.Puts
	t.Gets += s.Gets
	t.Served += s.Served
	t.BytesOut += s.BytesOut
	t.BytesIn += s.BytesIn
	t.Ops.Completed += s.Ops.Completed
	t.Ops.Failed += s.Ops.Failed
	t.Ops.Bytes += s.Ops.Bytes
	if t.Ops.Errors == nil {
		t.Ops.Errors = make([]ErrorCount, len(s.Ops.Errors))
	}
	for i, ec := range s.Ops.Errors { // one entry per kind, in kind order
		t.Ops.Errors[i].Kind = ec.Kind
		t.Ops.Errors[i].Count += ec.Count
	}
	t.ZeroCopy += s.ZeroCopy
	t.Staged += s.Staged
	t.Delegated += s.Delegated
	t.ServedRDMA += s.ServedRDMA
	for i, n := range s.NICWRs {
		if i == len(t.NICWRs) {
			t.NICWRs = append(t.NICWRs, 0)
		}
		t.NICWRs[i] += n
	}
	t.MsgsOut += s.MsgsOut
	t.MsgBytesOut += s.MsgBytesOut
	t.MsgsIn += s.MsgsIn
	t.MsgBytesIn += s.MsgBytesIn
}

// endpointGone is an endpoint's OnFail: it is no longer live, and its
// counters are added to its transport's closed endpoints' (a lane's are
// its endpoint's). Its Stats are read outside epMu: a TCP path's take
// the path's lock, and a path failing its lanes fails endpoints, whose
// OnFail takes epMu.
func (e *Engine) endpointGone(ep *Endpoint) {
	e.epMu.Lock()
	_, live := e.endpoints[ep]
	delete(e.endpoints, ep)
	e.epMu.Unlock()
	if !live || ep.lane {
		return // never registered (ep.path may be unset), or a lane
	}
	s := ep.Stats()
	k := int(ep.path.Kind())
	if k >= len(e.closedEps) {
		k = 0
	}
	e.epMu.Lock()
	e.closedEps[k].add(s)
	e.epMu.Unlock()
}

// ClosedEndpointStats returns the summed counters of the endpoints that
// have closed (or failed), one entry per transport that had one: what
// they counted while they were live (EndpointStats lists them no more).
// Peer and ID are empty, Lanes is 0. Counts an endpoint makes after it
// failed (a Put called on it then) are not in them.
func (e *Engine) ClosedEndpointStats() []EndpointStats {
	if e.invalid() {
		return nil
	}
	e.epMu.Lock()
	defer e.epMu.Unlock()
	var out []EndpointStats
	for k := range e.closedEps {
		c := &e.closedEps[k]
		if c.n == 0 {
			continue
		}
		s := c.s
		s.Transport = TransportKind(k)
		s.Ops.Errors = slices.Clone(s.Ops.Errors)
		s.NICWRs = slices.Clone(s.NICWRs)
		out = append(out, s)
	}
	return out
}

// transportStats are Stats.Transports: the transports that had endpoints.
func (e *Engine) transportStats() []TransportStats {
	var live [numTransportKinds]int
	e.epMu.Lock()
	for ep := range e.endpoints {
		if k := int(ep.path.Kind()); k < len(live) && !ep.lane {
			live[k]++
		}
	}
	e.epMu.Unlock()
	var out []TransportStats
	for k := range e.epOps {
		c := &e.epOps[k]
		if live[k] == 0 && c.completed.Load() == 0 && c.failed.Load() == 0 && k != int(TransportTCP) && k != int(TransportIPC) {
			continue
		}
		out = append(out, TransportStats{Transport: TransportKind(k), Endpoints: live[k], Ops: c.snapshot()})
	}
	return out
}

// ipcCacheStats are the counters of the cache of peers' buffers mapped
// into this process (the "ipc" transport's imports).
func (e *Engine) ipcCacheStats() ipc.CacheStats {
	if t, ok := e.transports.Get(datapath.KindIPC).(interface{ CacheStats() ipc.CacheStats }); ok {
		return t.CacheStats()
	}
	return ipc.CacheStats{}
}
