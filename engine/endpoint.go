package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// ErrPeer: a peer failed (disconnected, died, sent malformed frames) or
// refused a request. The message names the peer.
var ErrPeer = gxerr.Peer

const (
	ipcMaxFrame      = 192 << 10 // below the default SOCK_SEQPACKET send buffer
	handshakeTimeout = 5 * time.Second
	importTimeout    = 10 * time.Second
	maxServing       = 64 // concurrent requests served per endpoint
	maxHandshakes    = 64 // handshakes in progress per listener (the oldest is evicted beyond)
	sendTimeout      = 5 * time.Second
)

// Endpoint is a connection to a peer engine: Put and Get move data between
// local buffers and the peer's exported buffers.
type Endpoint struct {
	e    *Engine
	c    *wire.Conn
	kind TransportKind
	peer wire.Hello
	pid  ipc.PeerID
	name string

	mu        sync.Mutex
	pending   map[uint64]func(reply) // called once, never under mu
	nextID    atomic.Uint64
	idParity  uint64 // the parity of our request ids: 1 dialer, 0 acceptor
	failed    error
	hasFailed atomic.Bool
	done      chan struct{}
	once      sync.Once
	serving   sync.WaitGroup
	sem       chan struct{}
	reader    chan struct{}
	replyMu   sync.Mutex
	replyQ    []wire.Message // the reader's frames, sent by writer or carried by a Put
	replySig  chan struct{}
	writerEnd chan struct{}

	puts, gets, served atomic.Uint64
	active             atomic.Bool // the peer made a request (Listener.admit evicts idle peers first)

	// path moves the endpoint's data (nil while a transport still lives
	// in the engine's own files).
	path datapath.Path
}

type reply struct {
	f   wire.Frame
	err error
}

// newEndpoint makes the endpoint of a connection whose handshake is done,
// connects its data path (the transport registered for want, if any:
// connectPath) and starts its reader and writer.
func (e *Engine) newEndpoint(ctx context.Context, c *wire.Conn, peer wire.Hello, kind, want TransportKind, addr string, dialer bool) (*Endpoint, error) {
	name := fmt.Sprintf("peer %q (pid %d)", peer.Name, peer.PID)
	if kind == TransportTCP {
		name = fmt.Sprintf("peer %q (pid %d at %s)", peer.Name, peer.PID, addr)
	}
	ep := &Endpoint{
		e: e, c: c, peer: peer, kind: kind, name: name,
		pid:       ipc.PeerID{PID: peer.PID, PIDNS: peer.PIDNamespace, Instance: binary.LittleEndian.Uint64(peer.EngineID[:8]), Conn: e.ident.conns.Add(1)},
		pending:   map[uint64]func(reply){},
		done:      make(chan struct{}),
		sem:       make(chan struct{}, maxServing),
		reader:    make(chan struct{}),
		replySig:  make(chan struct{}, 1),
		writerEnd: make(chan struct{}),
	}
	if dialer {
		ep.idParity = 1
		ep.nextID.Store(1)
	}
	if t := e.transports[want]; t != nil {
		p, err := t.Connect(ctx, ep.ctrl())
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		ep.path = p
	}
	e.epMu.Lock()
	if e.closed.Load() {
		e.epMu.Unlock()
		_ = c.Close()
		if ep.path != nil {
			ep.path.Failed(ErrClosed)
			ep.path.Closed(ErrClosed)
		}
		return nil, ErrClosed
	}
	e.endpoints[ep] = struct{}{}
	// Engine.Close waits for the reader and writer before it releases
	// buffers, also for an endpoint that failed (and left e.endpoints)
	// but whose reader is still landing data.
	e.epLoops.Add(2)
	e.epMu.Unlock()
	var every time.Duration
	if e.cfg.PeerTimeout > 0 {
		every = e.cfg.PeerTimeout / 4
	}
	go func() {
		defer e.epLoops.Done()
		ep.writer(every)
	}()
	go func() {
		defer e.epLoops.Done()
		ep.readLoop()
	}()
	return ep, nil
}

// Transport says how the endpoint reaches its peer.
func (ep *Endpoint) Transport() TransportKind {
	if ep.path != nil {
		return TransportKind(ep.path.Kind())
	}
	return ep.kind
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
}

// Stats returns the endpoint's counters.
func (ep *Endpoint) Stats() EndpointStats {
	st := EndpointStats{Transport: ep.Transport(), Puts: ep.puts.Load(), Gets: ep.gets.Load(), Lanes: 1}
	if ep.path != nil {
		var ds datapath.Stats
		ep.path.Stats(&ds)
		st.Served, st.BytesOut, st.BytesIn, st.Lanes = ds.Served, ds.BytesOut, ds.BytesIn, max(ds.Lanes, 1)
		st.ZeroCopy, st.Staged, st.Delegated, st.ServedRDMA, st.NICWRs = ds.ZeroCopy, ds.Staged, ds.Delegated, ds.ServedRDMA, ds.NICWRs
		return st
	}
	st.Served = ep.served.Load()
	return st
}

// Peer names the peer (its program name and pid).
func (ep *Endpoint) Peer() string { return ep.name }

// Done is closed when the endpoint has failed or been closed.
func (ep *Endpoint) Done() <-chan struct{} { return ep.done }

// Err is why the endpoint ended (nil while it is up).
func (ep *Endpoint) Err() error {
	if !ep.hasFailed.Load() {
		return nil
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.failed
}

// Close ends the endpoint: pending operations fail, the peer's imported
// regions are released. Idempotent.
func (ep *Endpoint) Close() error {
	// Say goodbye, but never wait long for a peer that does not read.
	sent := make(chan struct{})
	go func() { _ = ep.c.Send(&wire.Bye{}); close(sent) }()
	select {
	case <-sent:
	case <-time.After(200 * time.Millisecond):
	}
	ep.fail(newErr(ErrClosed, "endpoint closed", nil))
	<-sent
	<-ep.reader
	<-ep.writerEnd
	ep.serving.Wait()
	return nil
}

// fail ends the endpoint once with err (its data path fails its lanes).
func (ep *Endpoint) fail(err error) { ep.failOnce(err) }

func (ep *Endpoint) failOnce(err error) {
	ep.once.Do(func() {
		ep.mu.Lock()
		ep.failed = err
		ep.hasFailed.Store(true)
		pend := ep.pending
		ep.pending = map[uint64]func(reply){}
		ep.mu.Unlock()
		_ = ep.c.Close()
		if ep.path != nil {
			ep.path.Failed(err)
		}
		for _, fn := range pend {
			fn(reply{err: err})
		}
		ep.e.epMu.Lock()
		delete(ep.e.endpoints, ep)
		ep.e.epMu.Unlock()
		close(ep.done)
		if !errors.Is(err, ErrClosed) {
			ep.e.log.Warn().Err(err).Str("peer", ep.name).Msg("endpoint failed")
		}
	})
}

func (ep *Endpoint) peerErr(what string, cause error) error {
	return newErr(ErrPeer, ep.name+": "+what, cause)
}

// roundTrip sends a request and waits for its reply frame (the caller
// owns the frame's fds).
func (ep *Endpoint) roundTrip(ctx context.Context, id uint64, m wire.Message) (wire.Frame, error) {
	ch := make(chan reply, 1)
	ep.mu.Lock()
	if ep.failed != nil {
		err := ep.failed
		ep.mu.Unlock()
		return wire.Frame{}, err
	}
	ep.pending[id] = func(r reply) { ch <- r }
	ep.mu.Unlock()
	if err := ep.c.Send(m); err != nil {
		ep.mu.Lock()
		delete(ep.pending, id)
		ep.mu.Unlock()
		return wire.Frame{}, ep.peerErr("send", err)
	}
	select {
	case r := <-ch:
		return r.f, r.err
	case <-ctx.Done():
		ep.mu.Lock()
		_, still := ep.pending[id]
		delete(ep.pending, id)
		ep.mu.Unlock()
		if !still { // the reader took the reply: it is being delivered
			r := <-ch
			_ = r.f.CloseFDs()
		}
		return wire.Frame{}, ctx.Err()
	}
}

func (ep *Endpoint) readLoop() {
	defer close(ep.reader)
	defer func() {
		err := ep.Err()
		if err == nil {
			err = newErr(ErrClosed, "endpoint closed", nil)
		}
		if ep.path != nil {
			ep.path.Closed(err)
			return
		}
	}()
	ctx := context.Background()
	for {
		var (
			f   wire.Frame
			err error
		)
		if sink := ep.sink(); sink != nil {
			f, err = ep.c.RecvRouted(ctx, sink)
		} else {
			f, err = ep.c.Recv(ctx)
		}
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded) && ep.Err() == nil:
				ep.fail(newErr(ErrPeer, fmt.Sprintf("%s: silent for %v (no frame, not even a heartbeat)", ep.name, ep.e.cfg.PeerTimeout), ErrTimeout))
			case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrTooLarge):
				ep.e.log.Error().Err(err).Str("peer", ep.name).Msg("malformed frame; closing the connection")
				ep.fail(ep.peerErr("malformed frame", err))
			default:
				ep.fail(ep.peerErr("connection lost", err))
			}
			return
		}
		if f.Routed {
			ep.path.Landed()
			continue
		}
		if err := ep.dispatch(f); err != nil {
			_ = f.CloseFDs()
			ep.e.log.Error().Err(err).Str("peer", ep.name).Msg("malformed frame; closing the connection")
			ep.fail(ep.peerErr("malformed frame", err))
			return
		}
	}
}

func (ep *Endpoint) dispatch(f wire.Frame) error {
	switch f.Header.Type {
	case wire.TypeCompletion, wire.TypeError, wire.TypeImportReply:
		ep.mu.Lock()
		fn, ok := ep.pending[f.Header.RequestID]
		delete(ep.pending, f.Header.RequestID)
		ep.mu.Unlock()
		if !ok {
			return f.CloseFDs() // a reply to a request we gave up on
		}
		// The payload aliases the connection's read buffer, which the next
		// Recv overwrites: the waiter gets its own copy.
		f.Payload = append([]byte(nil), f.Payload...)
		fn(reply{f: f})
		return nil
	}
	m, err := f.Message()
	if err != nil {
		return err
	}
	if ep.path != nil {
		if ok, err := ep.path.Handle(&f, m); ok || err != nil {
			return err
		}
	}
	switch m := m.(type) {
	case *wire.ImportRequest:
		ep.active.Store(true)
		return errors.New("ImportRequest on a transport without fd passing")
	case *wire.Put:
		ep.active.Store(true)
		return ep.serveAny(true, m.Request)
	case *wire.Get:
		ep.active.Store(true)
		return ep.serveAny(false, m.Request)
	case *wire.Invalidate: // imports of a transport without any (shm handles its own)
	case *wire.Heartbeat:
	case *wire.Bye:
		ep.fail(ep.peerErr("peer closed the endpoint", nil))
	default:
		return fmt.Errorf("unexpected %v", f.Header.Type)
	}
	return nil
}

// serveAny refuses a peer's request that no data path took (its data
// would travel in a way this endpoint's transport does not offer): the
// peer is broken.
func (ep *Endpoint) serveAny(put bool, r wire.Request) error {
	return fmt.Errorf("request with local kind %d on the %v transport", r.Local.Kind, ep.kind)
}

// lookupKey checks a key a peer presented and returns the slice it names
// (off, n within the key's view). Every check the owner makes is here.
func (e *Engine) lookupKey(k *wire.RemoteKey, off, n uint64, need wire.KeyFlags) (Slice, wire.Status, string) {
	if k.Owner != e.ident.hello.EngineID {
		return Slice{}, wire.StatusBadKey, "key belongs to another engine"
	}
	if err := e.verifyKey(k); err != nil {
		return Slice{}, wire.StatusBadKey, "key signature does not verify"
	}
	if !k.Allows(need) {
		return Slice{}, wire.StatusAccess, "key does not grant this access"
	}
	start, err := k.Span(off, n)
	if err != nil {
		return Slice{}, wire.StatusOutOfRange, err.Error()
	}
	e.mu.Lock()
	b := e.buffers[k.AllocID]
	e.mu.Unlock()
	if b == nil || k.Generation != e.ident.epoch || b.state.Load()&freedBit != 0 || b.size != k.Length || !b.exported.Load() {
		return Slice{}, wire.StatusStale, "buffer no longer exported"
	}
	return b.Slice(int(start), int(n)), wire.StatusOK, ""
}

// verifyKey checks k's signature. The last key that verified is kept: a
// peer repeating it (a loop of small transfers to one buffer) presents
// the same signed bytes, and equal bytes need no second MAC.
func (e *Engine) verifyKey(k *wire.RemoteKey) error {
	signed := *k
	signed.Offset, signed.Len = 0, 0 // the view is not signed
	if last := e.lastVerified.Load(); last != nil && *last == signed {
		return nil
	}
	if err := e.ident.signer.Verify(k); err != nil {
		return err
	}
	e.lastVerified.Store(&signed)
	return nil
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
// ctx bounds the waits of the operation on this side: for send credits,
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

// sink is where the reader lands Data frames (nil: the transport sends
// none on the control connection).
func (ep *Endpoint) sink() wire.DataSink {
	if ep.path != nil {
		return ep.path.Sink()
	}
	return nil
}

// start runs a checked Put or Get on the endpoint's data path.
func (ep *Endpoint) start(ctx context.Context, put bool, local Slice, remote RemoteKey, opts []OpOption) *Future {
	r := datapath.Req{Put: put, Local: local.mem(), Key: remote.k}
	if mk, ok := remote.mapKey(); ok {
		r.MapKey = &mk
	}
	if len(opts) > 0 || ep.e.cfg.OpTimeout > 0 {
		r.Deadline = ep.e.opConfig(opts).deadline
	}
	f := newFuture(1)
	f.setSpin(ep.e.cfg.WaitSpin)
	ep.path.Start(ctx, r, f.completer())
	return f
}

func (ep *Endpoint) rma(ctx context.Context, put bool, local Slice, remote RemoteKey, opts []OpOption) *Future {
	e := ep.e
	if err := checkCtx(ctx); err != nil {
		return resolved(err)
	}
	if e.closed.Load() {
		return resolved(ErrClosed)
	}
	if err := ep.Err(); err != nil {
		return resolved(err)
	}
	if err := e.validateSlice(local); err != nil {
		return resolved(err)
	}
	if remote.err != nil {
		return resolved(remote.err)
	}
	if err := remote.k.Check(0, remote.k.Len); err != nil {
		return resolved(newErr(ErrInvalid, "remote key view", err))
	}
	if remote.k.Len != local.n {
		return resolved(newErr(ErrInvalid, fmt.Sprintf("length mismatch: local %d, remote %d", local.n, remote.k.Len), nil))
	}
	if remote.k.Owner != ep.peer.EngineID {
		return resolved(newErr(ErrInvalid, "remote key belongs to another engine than "+ep.name, nil))
	}
	if put && !remote.k.Allows(wire.KeyWrite) || !put && !remote.k.Allows(wire.KeyRead) {
		return resolved(newErr(ErrInvalid, "remote key does not grant this access", nil))
	}
	if put {
		ep.puts.Add(1)
	} else {
		ep.gets.Add(1)
	}
	if ep.path != nil {
		return ep.start(ctx, put, local, remote, opts)
	}
	return resolved(newErr(ErrNotSupported, "no data path for the "+ep.kind.String()+" transport", nil))
}

// decodeOrPeerError decodes f into m; a frame that is not one is
// dropped (its fds closed), and the error is the peer's own when it sent
// an Error instead.
func decodeOrPeerError(f *wire.Frame, m wire.Message) error {
	err := f.Decode(m)
	if err == nil {
		return nil
	}
	_ = f.CloseFDs()
	if f.Header.Type == wire.TypeError {
		var pe wire.Error
		if f.Decode(&pe) == nil {
			return &pe
		}
	}
	return err
}
