// Package datapath is the contract between gxfer's engine and its data
// paths: how the bytes of an endpoint's Puts and Gets travel (shared
// memory on one node, TCP, RDMA), each implemented in a package of its own
// under internal/datapath.
//
// The engine owns buffers, keys, futures, endpoints and their control
// connections; a data path owns its protocol state. They meet here:
//
//   - Buf and Mem are local memory as a data path sees it (the engine's
//     buffers implement Buf).
//   - Env is what the engine offers every data path: the owner-side key
//     checks, device DMA between Gaudi and host memory, host allocations,
//     tracked goroutines and the close gate.
//   - Ctrl is one endpoint's control channel: request ids, round trips,
//     replies, failure (implemented by internal/ctrlchan, over a
//     connection internal/handshake opened).
//   - Transport is one kind of data path, engine-wide (its NICs, staging
//     buffers, registrations); it makes a Path for each endpoint.
//   - Path moves one endpoint's data and serves the peer's requests of its
//     kind.
//
// A new transport is one package implementing Transport and Path, and one
// registration in the engine (engine/transports.go, into a Set).
package datapath

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/internal/memcopy"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// Kind names a transport; the values are engine.TransportKind's.
type Kind uint8

// Transport kinds.
const (
	KindAuto Kind = iota
	KindTCP
	KindRDMA
	KindIPC
	KindPipe // the in-memory pair (tests)
)

// Buf is a local buffer: host memory (HostBytes reaches it) or Gaudi
// memory (Addr is its device address). Acquire holds the memory until the
// matching Release: Free and Close wait for it.
type Buf interface {
	ID() uint64
	Len() uint64
	IsGaudi() bool
	Addr() uint64
	HostBytes() []byte // host memory: all of it; nil for Gaudi memory
	Acquire() error    // the buffer's error once it is being freed or its engine closed
	Release()
	// Shared is the memfd of engine-allocated host memory (nil for other
	// memory): what a peer on this node maps.
	Shared() *ipc.Shared
	// State is the per-buffer state data paths keep (RDMA regions, peers
	// that mapped it), guarded by its mutex.
	State() *BufState
	// ExportDMABuf exports Gaudi memory as a DMA-BUF (for RDMA
	// registration); Release drops the export.
	ExportDMABuf() (DMABuf, error)
}

// BufState is a buffer's data-path state.
type BufState struct {
	Mu   sync.Mutex
	RDMA any // the RDMA transport's regions of the buffer
	IPC  any // the IPC transport's record of the peers that mapped it
}

// DMABuf is a Gaudi buffer's DMA-BUF export.
type DMABuf struct {
	FD      int    // the DMA-BUF's descriptor
	Offset  uint64 // the buffer's offset in it
	Release func() // drops the export (nil: nothing to drop)
	// Registered (nil: none) is called once the data path registered the
	// export with a NIC (statistics of runtime memory).
	Registered func()
}

// Mem is Len bytes at Off in a buffer.
type Mem struct {
	B        Buf
	Off, Len uint64
}

// Sub is n bytes at off within m.
func (m Mem) Sub(off, n uint64) Mem { return Mem{B: m.B, Off: m.Off + off, Len: n} }

// Host is m's bytes (host memory only).
func (m Mem) Host() []byte { return m.B.HostBytes()[m.Off : m.Off+m.Len] }

// Addr is the address of m's first byte (host or device).
func (m Mem) Addr() uint64 { return m.B.Addr() + m.Off }

// IsGaudi reports whether m is device memory.
func (m Mem) IsGaudi() bool { return m.B.IsGaudi() }

// Waiter is an operation the engine runs for a data path (a DMA, a copy).
type Waiter interface {
	Done() <-chan struct{}
	IsDone() bool
	Err() error
	Wait(ctx context.Context) error
}

// Completer resolves a user's operation: Complete once with its result,
// or CompleteAll early (a deadline), after which Complete is ignored.
type Completer interface {
	Complete(idx int, err error)
	CompleteAll(err error)
}

// ManyCompleter is a Completer of a list that also takes the successful
// end of many of its elements at once (a Lister's job that moved them
// together): CompleteOK(idx) is Complete(i, nil) for each i of idx.
type ManyCompleter interface {
	Completer
	CompleteOK(idx []int)
}

// Config is the part of the engine's configuration data paths read.
type Config struct {
	WaitSpin    time.Duration // Future.Wait's spin
	PeerTimeout time.Duration // a silent peer fails the endpoint after it
	TCPReadSpin time.Duration
	TCPLanes    int
	// HostCopy copies host memory on the data path (nil: copy()).
	HostCopy *memcopy.Copier
}

// Env is what the engine offers its data paths.
type Env interface {
	Logger() zerolog.Logger
	Config() Config
	// Lookup checks a key a peer presented for access need to n bytes at
	// off of its view and returns the memory it names; every owner-side
	// check is there. A status other than StatusOK comes with a message
	// for the peer. A key that passed names one buffer of its length: the
	// memory of another range inside its view (wire.RemoteKey.InSpan) is
	// in the same buffer, as far from this one as the ranges are apart.
	Lookup(k *wire.RemoteKey, off, n uint64, need wire.KeyFlags) (Mem, wire.Status, string)
	// DMA copies between Gaudi memory and host memory (or two Gaudi
	// ranges) for a data path that holds both buffers; the waiter resolves
	// once the DMA retired (or at deadline, the DMA still holding the
	// buffers).
	DMA(dst, src Mem, deadline time.Time) Waiter
	// Copy is Engine.Copy: any memory, ctx cancels what has not started.
	Copy(ctx context.Context, dst, src Mem, deadline time.Time) Waiter
	// AllocHost allocates shareable host memory (freed with FreeHost).
	AllocHost(n uint64) (Buf, error)
	FreeHost(b Buf) error
	// WrapHost makes a buffer of host memory mapped from elsewhere (a
	// peer's), so that the device DMA can reach it; onDestroy runs once
	// it is gone.
	WrapHost(mem []byte, onDestroy func() error) (Buf, error)
	// Go runs fn on a goroutine that Engine.Close waits for.
	Go(fn func())
	// Enter admits a copy on the caller's goroutine (false once the
	// engine is closing) and runs the gate's test hook; Exit ends it.
	// Close unmaps nothing while a copy is admitted. Gate is the same gate
	// for hot paths (no indirect call).
	Enter() bool
	Exit()
	Gate() *Gate
	// Slot takes one of the engine's transfer slots (bounding the
	// goroutines that wait on peers), waiting until ctx ends.
	Slot(ctx context.Context) (release func(), err error)
	// CountInline adds n copies of size bytes each done on a caller's
	// goroutine to the engine's statistics.
	CountInline(n, size uint64)
}

// Ctrl is an endpoint's control channel as its data path sees it.
type Ctrl interface {
	Env() Env
	Name() string     // the peer, for messages
	Conn() *wire.Conn // the control connection
	Peer() ipc.PeerID // the peer's identity on this connection
	PeerHello() *wire.Hello
	Dialer() bool

	// NewID issues a request id of this side's parity (the dialer's are
	// odd); Ours says whether id has it.
	NewID() uint64
	Ours(id uint64) bool
	// Expect registers fn for the reply to request id: called once with
	// the reply frame or the endpoint's failure, never under a lock (the
	// frame's payload valid during the call only: see Replier). It fails
	// if the endpoint has failed.
	Expect(id uint64, fn func(f wire.Frame, err error)) error
	// ExpectRequest is Expect for a request the peer serves: it first
	// waits (until ctx ends or the endpoint fails) for one of the
	// endpoint's slots for requests outstanding, given back with the
	// reply, the Forget or the failure. r takes the reply as Expect's fn.
	ExpectRequest(ctx context.Context, id uint64, r Replier) error
	// RequestSlot takes such a slot for a request sent with RoundTrip
	// (which takes none); release gives it back, once.
	RequestSlot(ctx context.Context) (release func(), err error)
	// Forget takes back a registration; false: the reply is being
	// delivered (or the failure).
	Forget(id uint64) bool
	// RoundTrip sends m (request id) and waits for its reply (the caller
	// owns the frame's fds).
	RoundTrip(ctx context.Context, id uint64, m wire.Message) (wire.Frame, error)
	// QueueReply hands a frame to the endpoint's writer (the reader never
	// writes itself); TakeReplies removes those queued (a sender carries
	// them along).
	QueueReply(m wire.Message) error
	TakeReplies() []wire.Message
	// Serve runs fn on a goroutine within the endpoint's limit of
	// requests in progress, then sends the reply fn returns (if not
	// nil), the request's slot given back first; false: over the limit
	// (refuse the request).
	Serve(fn func() wire.Message) bool
	// MarkActive records that the peer made a request.
	MarkActive()

	Fail(err error)
	Err() error
	Done() <-chan struct{}

	// Errors naming the peer.
	PeerErr(what string, cause error) error
	ReplyErr(f wire.Frame) error // a Completion or Error reply
	Refusal(what string, m *wire.Error) error
	SendErr(err error) error // a failure to send on the connection
}

// Req is a Put or Get a user requested on an endpoint.
type Req struct {
	Put   bool
	Local Mem
	// Key names the peer's memory (its view the same length as Local).
	Key wire.RemoteKey
	// MapKey is a key granting the whole allocation Key was sliced from,
	// when the caller holds one (nil else): shared memory can map it. It
	// may be nil when Key itself grants the whole allocation (a path then
	// maps with Key).
	MapKey *wire.RemoteKey
	// Deadline (zero: none) ends the operation with ErrTimeout.
	Deadline time.Time
}

// Replier takes the reply to a request (Ctrl.ExpectRequest). A request's
// own type implements it, so that registering costs no allocation (a
// method value made per request would be one). The reply frame's payload
// aliases the connection's read buffer, which the next frame overwrites:
// valid during the call only, copied by a Replier that keeps it (as
// Expect's fn).
type Replier interface {
	Reply(f wire.Frame, err error)
}

// ReplyFunc is a Replier that calls the function.
type ReplyFunc func(f wire.Frame, err error)

// Reply calls fn.
func (fn ReplyFunc) Reply(f wire.Frame, err error) { fn(f, err) }

// Path moves one endpoint's data. Its methods other than Start and Bind
// are called by the endpoint's reader goroutine, which they must not
// block.
type Path interface {
	Kind() Kind
	// Start runs r, resolving c once (see Completer) when nothing touches
	// r.Local any more, or at its deadline. ctx bounds its waits; when it
	// ends, what has not started is dropped and c resolves with the
	// context's typed error.
	Start(ctx context.Context, r Req, c Completer)
	// Handle takes a frame of the peer that is this path's to handle (a
	// request it serves, a path-specific message); false: not its. f is
	// valid only during the call (its payload aliases the connection's
	// read buffer, and the frame is reused): m is the decoded message.
	Handle(f *wire.Frame, m wire.Message) (bool, error)
	// Sink routes Data frames arriving on the control connection (nil for
	// a path whose bytes travel elsewhere); Landed follows each frame
	// whose bytes the sink took.
	Sink() wire.DataSink
	Landed()
	// Tick runs at every heartbeat.
	Tick()
	// Failed is called once when the endpoint fails (flush what is in
	// flight); Closed once its reader has exited (release everything).
	Failed(err error)
	Closed(err error)
	// Stats adds the path's counters.
	Stats(s *Stats)
	// Bind prepares repeated transfers between local host memory and the
	// peer memory k names (ErrNotSupported where the path cannot).
	Bind(ctx context.Context, local Mem, k wire.RemoteKey, mapKey *wire.RemoteKey, deadline time.Time) (Bound, error)
}

// Starter is a Path told when its endpoint started: registered by the
// engine, its channel running (called once, by the goroutine that made
// the endpoint, before the endpoint is handed out; not if it failed first).
type Starter interface {
	Started()
}

// Bound is a prepared binding (see engine.Binding).
type Bound interface {
	// Do runs n Puts (put) or Gets; wait: return once they completed.
	Do(put bool, n int, wait bool) error
	Flush() error
	Close() error
	// Inline reports whether the operations are copies on the caller's
	// goroutine (counted as inline in the engine's Stats).
	Inline() bool
}

// Stats are an endpoint's data-path counters (engine.EndpointStats).
type Stats struct {
	Served, BytesOut, BytesIn uint64
	Lanes                     int
	ZeroCopy, Staged          uint64
	Delegated, ServedRDMA     uint64
	NICWRs                    []uint64
}

// Transport is one kind of data path, engine-wide.
type Transport interface {
	Kind() Kind
	// Connect makes the data path of an endpoint whose control connection
	// has just exchanged Hellos (for RDMA: brings up its queue pairs over
	// it).
	Connect(ctx context.Context, c Ctrl) (Path, error)
	// Close is called once every endpoint is closed, before the engine
	// frees the buffers still alive (drop imports of peers' memory here).
	Close() error
}

// Finisher is implemented by transports that hold resources the engine's
// buffers use until they are freed (NIC registrations): Finish runs last,
// after every buffer is gone (BufferHooks.Freeing called for each).
type Finisher interface {
	Finish() error
}

// BufferHooks is implemented by transports that keep per-buffer state:
// Export adds to a key being exported, Revoke runs when Free is called
// (the memory lives on until operations in flight end), Freeing before
// the memory goes.
type BufferHooks interface {
	Export(b Buf, k *wire.RemoteKey)
	Revoke(b Buf)
	Freeing(b Buf) error
}

// Fencer is implemented by paths on which a Put completes before its bytes
// are certainly visible to the peer's CPU (RDMA: the write's completion
// says the responder acknowledged it, not that it was placed in memory).
// Fence returns once every byte of every Put that completed before it was
// called is visible to the peer, so that a message sent next on the
// control connection arrives after them (engine.Endpoint.Send). Paths
// whose Puts complete only once the bytes are in the peer's memory (shared
// memory, TCP, the pipe) need no fence.
type Fencer interface {
	Fence(ctx context.Context) error
}

// Lister is implemented by paths that move a list of Puts or Gets faster
// as one operation than one by one (one copy job split over cores for
// shared memory; one request streamed over the lanes for TCP). Every
// request of reqs has the same direction (reqs[i].Put) and deadline, and
// was checked as Start's are. StartList resolves c once per request:
// c.Complete(i, err) for reqs[i] once nothing touches reqs[i].Local any
// more (CompleteAll at the deadline). ctx is as Start's. Once StartList
// has returned and every request has been resolved, the path does not
// read reqs again (the engine reuses it). The engine calls Start for
// each request of paths that do not implement it.
type Lister interface {
	StartList(ctx context.Context, reqs []Req, c Completer)
}

// WithDeadline is ctx bounded by deadline when it is set (an operation's
// Deadline option, kept apart from its ctx).
func WithDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}
