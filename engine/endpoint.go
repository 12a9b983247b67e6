package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/ctrlchan"
	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/handshake"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// ErrPeer: a peer failed (disconnected, died, sent malformed frames) or
// refused a request. The message names the peer.
var ErrPeer = gxerr.Peer

// Endpoint is a connection to a peer engine: Put and Get move data between
// local buffers and the peer's exported buffers.
//
// An Endpoint is made by Engine.Dial or Listener.Accept. One not made so
// (a declared Endpoint{}, or a nil *Endpoint) is an ended one: its
// operations, Close and Err are ErrInvalid, Done is closed, and
// Transport, Stats and Peer give zero values.
type Endpoint struct {
	e    *Engine
	ch   *ctrlchan.Chan // the control channel (internal/ctrlchan)
	path datapath.Path  // moves the endpoint's data (internal/datapath)

	puts, gets atomic.Uint64
	ops        opCounters // Puts and Gets as they end (opstats.go)
	lane       bool       // an extra connection of a TCP endpoint: not listed by EndpointStats
	source     string     // see Source
}

// newEndpoint makes the endpoint of a connection whose handshake is done
// (handshake.Connect): its control channel, and its data path, made by
// the transport registered for kind; then it starts the channel.
func (e *Engine) newEndpoint(ctx context.Context, c *wire.Conn, peer wire.Hello, kind datapath.Kind, addr string, dialer bool) (*Endpoint, handshake.Peer, error) {
	name := fmt.Sprintf("peer %q (pid %d)", peer.Name, peer.PID)
	if addr != "" {
		name = fmt.Sprintf("peer %q (pid %d at %s)", peer.Name, peer.PID, addr)
	}
	ep := &Endpoint{e: e, lane: peer.Caps&wire.CapLane != 0 || ctx.Value(laneKey{}) != nil}
	if !dialer {
		ep.source = handshake.PeerSource(addr, peer.PID)
	}
	ep.ch = ctrlchan.New(ctrlchan.Config{
		Env: e.env(), Conn: c, Peer: peer, Name: name, Dialer: dialer,
		PeerID:     ipc.PeerID{PID: peer.PID, PIDNS: peer.PIDNamespace, Instance: binary.LittleEndian.Uint64(peer.EngineID[:8]), Conn: e.ident.conns.Add(1)},
		MaxReplies: tcp.MaxInbound + ctrlchan.MaxServing,
		MsgRing:    kind == datapath.KindIPC && peer.Caps&wire.CapMsgRing != 0 && peer.Caps&wire.CapFDPassing != 0,
		Loops:      &e.epLoops, // Engine.Close waits for the reader and writer before it releases buffers
		OnFail:     func(error) { e.endpointGone(ep) },
	})
	t := e.transports.Get(kind)
	if t == nil {
		_ = c.Close()
		return nil, nil, newErr(ErrNotSupported, "no data path for the "+TransportKind(kind).String()+" transport", nil)
	}
	p, err := t.Connect(ctx, ep.ch)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	ep.path = p
	if h := e.hookPath.Load(); h != nil {
		(*h)(p)
	}
	// A listener's: the endpoint counts as made from here, before it
	// serves (its dialer may send requests already); refused, it was
	// closed to make room meanwhile and tells the peer so (its channel
	// failed, below).
	if !dialer {
		if err := handshake.Made(ctx, ep.ch); err != nil {
			ep.ch.Evict(err.Error())
		}
	}
	e.epMu.Lock()
	if e.closed.Load() {
		err = ErrClosed
	} else if err = ep.ch.Start(p); err == nil {
		// Start refuses a channel failed already (evicted: above, or by
		// the listener since Made), which is not kept. A lane the path
		// opened that failed before does not fail it (tcp's laneFailed
		// drops the lane).
		e.endpoints[ep] = struct{}{}
	}
	e.epMu.Unlock()
	if err != nil {
		// Not under epMu: closing the path closes the lanes it opened,
		// endpoints whose failure takes epMu (OnFail).
		_ = c.Close()
		p.Failed(err)
		p.Closed(err)
		return nil, nil, err
	}
	if s, ok := p.(datapath.Starter); ok {
		s.Started() // not under epMu either (tcp closes the lanes that failed)
	}
	return ep, ep.ch, nil
}

// Transport says how the endpoint reaches its peer.
func (ep *Endpoint) Transport() TransportKind {
	if ep.invalid() {
		return TransportAuto
	}
	return TransportKind(ep.path.Kind())
}

// EndpointStats counts an endpoint's traffic.
type EndpointStats struct {
	Transport TransportKind // the endpoint's transport, as Transport returns
	Puts      uint64        // Puts requested by this side
	Gets      uint64        // Gets requested by this side
	Served    uint64        // the peer's requests this side completed (TCP)
	BytesOut  uint64        // bytes sent in Data frames (TCP)
	BytesIn   uint64        // bytes received in Data frames (TCP)
	Lanes     int           // connections (TCP: Config.TCPLanes when dialed, 1 when accepted)

	// Peer names the peer, as Endpoint.Peer does (several endpoints may
	// have the same peer name).
	Peer string
	// ID numbers the endpoint in its engine: no other endpoint of the
	// engine has it.
	ID uint64
	// Ops counts the Puts and Gets this side requested as they end (their
	// latencies are in Engine.Stats, by transport).
	Ops OpStats

	// RDMA: which path each Put and Get this side requested took.
	ZeroCopy  uint64 // RDMA write/read straight between the two buffers
	Staged    uint64 // local Gaudi memory staged through pinned host buffers (no DMA-BUF region), pipelined
	Delegated uint64 // the peer's memory has no rkey: the peer moved the data with RDMA against our registered region
	// ServedRDMA counts the peer's delegated requests this side performed.
	ServedRDMA uint64
	// NICWRs counts the work requests this side posted on each of the
	// endpoint's queue pairs, one per NIC both sides have (large transfers
	// are sliced over them).
	NICWRs []uint64

	// Messages (Send, Recv): MsgsOut and MsgBytesOut count those sent,
	// MsgsIn and MsgBytesIn those that arrived from the peer (taken by
	// Recv or not yet).
	MsgsOut, MsgBytesOut, MsgsIn, MsgBytesIn uint64
}

// Stats returns the endpoint's counters.
func (ep *Endpoint) Stats() EndpointStats {
	if ep.invalid() {
		return EndpointStats{}
	}
	var ds datapath.Stats
	ep.path.Stats(&ds)
	ms := ep.ch.MsgStats()
	return EndpointStats{
		Transport: ep.Transport(), Peer: ep.Peer(), ID: ep.ch.Peer().Conn, Ops: ep.ops.snapshot(), Puts: ep.puts.Load(), Gets: ep.gets.Load(),
		Served: ds.Served, BytesOut: ds.BytesOut, BytesIn: ds.BytesIn, Lanes: max(ds.Lanes, 1),
		ZeroCopy: ds.ZeroCopy, Staged: ds.Staged, Delegated: ds.Delegated, ServedRDMA: ds.ServedRDMA, NICWRs: ds.NICWRs,
		MsgsOut: ms.Out, MsgBytesOut: ms.OutBytes, MsgsIn: ms.In, MsgBytesIn: ms.InBytes,
	}
}

// Peer names the peer (its program name and pid).
func (ep *Endpoint) Peer() string {
	if ep.invalid() {
		return ""
	}
	return ep.ch.Name()
}

// Source is where the peer of an endpoint a Listener accepted connects
// from, as the socket says (not a name the peer chose): a TCP peer's IP
// address (an IPv6 peer's /64), "pid N" for a unix socket peer; what
// Config.MaxPeersPerSource counts. "" for an endpoint this engine dialed.
func (ep *Endpoint) Source() string {
	if ep.invalid() {
		return ""
	}
	return ep.source
}

// Done is closed when the endpoint has failed or been closed.
func (ep *Endpoint) Done() <-chan struct{} {
	if ep.invalid() {
		return endedChan
	}
	return ep.ch.Done()
}

// Err is why the endpoint ended (nil while it is up).
func (ep *Endpoint) Err() error {
	if ep.invalid() {
		return errNoEndpoint
	}
	return ep.ch.Err()
}

// Close ends the endpoint: pending operations fail with ErrClosed, the
// peer's imported regions are released, and the endpoint's Bindings left
// open fail their calls with ErrClosed from then on (an RDMA one gives
// its registered region back at once; Close them still). It returns once nothing
// of the endpoint runs any more (its reader, its writer, the peer's
// requests it was serving). Messages Send had returned for are not lost:
// over TCP, Close waits (at most 500 ms) until the peer's host has
// acknowledged what was sent. Idempotent.
func (ep *Endpoint) Close() error {
	if ep.invalid() {
		return errNoEndpoint
	}
	return ep.ch.Close()
}

// Put copies local into the peer's buffer named by remote (same length).
// Into the peer's host memory the copy is made here, into its shared memfd
// (mapped once through the IPC handle cache): a memmove for local host
// memory, a device DMA for local Gaudi memory. Into the peer's Gaudi memory
// the peer performs the DMA from our shared memory. Over TCP the bytes
// travel in Data frames the owner lands; over RDMA as RDMA writes when the
// key carries an rkey, else the owner moves the data with RDMA against a
// registered region of ours. The future completes when the bytes are in
// the peer's memory as far as the transport can tell, and Puts are not
// ordered with one another (package doc, "Completion and ordering"). On
// an RDMA endpoint, Put waits while the queue pair has its maximum of work
// requests in flight; the Timeout option bounds direct RDMA transfers and
// the requests the peer performs.
//
// A request the peer serves (every Put and Get over TCP, those into or
// from the peer's Gaudi memory over "unix", delegated RDMA requests)
// first waits, in Put, for one of the connection's 64 slots for requests
// in progress: a caller that issues many at once is held back rather
// than refused by the peer.
//
// ctx bounds the waits of the operation on this side: for request slots, send credits,
// staging buffers and transfer slots (RDMA, and the peer's DMA over
// "unix"), and for the answer of a request the peer performs into a
// bounce buffer of ours ("unix"). When it ends first the future resolves
// with ErrCanceled or ErrTimeout (wrapping ctx's error), once the work
// already handed to the NIC or the DMA engine that touches local has
// finished. An RDMA request the owner performs (the owner may be moving
// data against a region of ours) resolves once the owner has answered,
// or, silent for PeerTimeout after ctx ended, once the endpoint has failed
// and the region is out of its reach. Over TCP, the Data frames not yet
// sent are dropped (the owner is told) and the answer is no longer
// waited for (a Get's bytes still arriving are dropped); the future
// resolves once no frame reads or writes local any more.
func (ep *Endpoint) Put(ctx context.Context, local Slice, remote RemoteKey, opts ...OpOption) *Future {
	return ep.rma(ctx, true, local, remote, opts)
}

// Get copies the peer's buffer named by remote into local.
func (ep *Endpoint) Get(ctx context.Context, local Slice, remote RemoteKey, opts ...OpOption) *Future {
	return ep.rma(ctx, false, local, remote, opts)
}

// PutSync and GetSync are the synchronous twins.
func (ep *Endpoint) PutSync(ctx context.Context, local Slice, remote RemoteKey, opts ...OpOption) error {
	return waitSync(ctx, ep.Put(ctx, local, remote, opts...))
}

// GetSync is the synchronous twin of Get.
func (ep *Endpoint) GetSync(ctx context.Context, local Slice, remote RemoteKey, opts ...OpOption) error {
	return waitSync(ctx, ep.Get(ctx, local, remote, opts...))
}

// waitSync waits for f; when ctx ends first it still waits for the
// operation (its buffers are in use until then) and returns the
// operation's error, or, if it succeeded all the same, ErrCanceled or
// ErrTimeout wrapping ctx's error.
func waitSync(ctx context.Context, f *Future) error {
	if err := f.Wait(ctx); err != nil && !f.IsDone() {
		<-f.Done()
		if ferr := f.Err(); ferr != nil {
			return ferr
		}
		return err
	}
	return f.Err()
}

// start runs a checked Put or Get on the endpoint's data path.
func (ep *Endpoint) start(ctx context.Context, put bool, local Slice, remote RemoteKey, opts []OpOption) *Future {
	r := datapath.Req{Put: put, Local: local.mem(), Key: remote.k, MapKey: remote.reqMapKey()}
	if len(opts) > 0 || ep.e.cfg.OpTimeout > 0 {
		r.Deadline = ep.e.opConfig(opts).deadline
	}
	ep.ch.MarkUsed() // in use: not idle for a listener that makes room (Config.PeerIdleEvict)
	o := &epOp{ep: ep, n: uint64(local.n), start: opClock()}
	o.init(1)
	o.setSpin(ep.e.cfg.WaitSpin)
	ep.path.Start(ctx, r, o)
	return &o.Future
}

// usable is nil when an operation may start on the endpoint: ctx not
// ended, the engine not closed, the endpoint not failed.
func (ep *Endpoint) usable(ctx context.Context) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if ep.e.closed.Load() {
		return ErrClosed
	}
	return ep.Err()
}

func (ep *Endpoint) rma(ctx context.Context, put bool, local Slice, remote RemoteKey, opts []OpOption) *Future {
	if ep.invalid() {
		return resolved(errNoEndpoint)
	}
	if err := ep.usable(ctx); err != nil {
		return resolved(err)
	}
	if !ep.e.enterStart() {
		return resolved(ErrClosed)
	}
	defer ep.e.exitStart()
	if err := ep.check(put, &local, &remote); err != nil {
		return resolved(err)
	}
	if put {
		ep.puts.Add(1)
	} else {
		ep.gets.Add(1)
	}
	return ep.start(ctx, put, local, remote, opts)
}

// check is the check of one Put or Get (rma's and each element of a
// list's) against the endpoint's peer.
func (ep *Endpoint) check(put bool, local *Slice, remote *RemoteKey) error {
	return ep.checkOwned(put, local, remote, &ep.ch.PeerHello().EngineID)
}

// checkOwned is check with the peer's engine id looked up once (a list's
// elements share it).
func (ep *Endpoint) checkOwned(put bool, local *Slice, remote *RemoteKey, peer *wire.EngineID) error {
	if err := ep.e.validateSlice(*local); err != nil {
		return err
	}
	if remote.err != nil {
		return remote.err
	}
	if err := remote.k.Check(0, remote.k.Len); err != nil {
		return newErr(ErrInvalid, "remote key view", err)
	}
	if remote.k.Len != local.n {
		return newErr(ErrInvalid, fmt.Sprintf("length mismatch: local %d, remote %d", local.n, remote.k.Len), nil)
	}
	if remote.k.Owner != *peer {
		return newErr(ErrInvalid, "remote key belongs to another engine than "+ep.Peer(), nil)
	}
	if put && !remote.k.Allows(wire.KeyWrite) || !put && !remote.k.Allows(wire.KeyRead) {
		return newErr(ErrInvalid, "remote key does not grant this access", nil)
	}
	return nil
}
