package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/engine"
)

// The peer tests over the ipc and tcp transports: this process (the
// client) moves data to and from the buffers of a perf server (Serve)
// through an engine Endpoint, and the two agree on buffers over the
// control channel.

func init() {
	for _, t := range []Test{
		{Name: "put_lat", Peer: PeerDst, Latency: true,
			Desc: "ping-pong: Put into the peer's buffer, the peer polls its memory and Puts back; latency = round trip / 2, like ucx_perftest put_lat (with Gaudi memory at either end: the Put's completion round trip)"},
		{Name: "put_bw", Peer: PeerDst,
			Desc: "Puts into the peer's buffer, -O outstanding, the same buffers every iteration (like ucx_perftest put_bw)"},
		{Name: "get_lat", Peer: PeerSrc, Latency: true,
			Desc: "Get round trip: one Get from the peer's buffer at a time, submit to completion"},
		{Name: "get_bw", Peer: PeerSrc,
			Desc: "Gets from the peer's buffer, -O outstanding, the same buffers every iteration"},
	} {
		t.Transport, t.AlsoOver, t.Src, t.Dst = "ipc", []string{"tcp", "rdma"}, Host, Host
		t.Prepare = prepareIPC(t.Name, t.Peer == PeerDst)
		Register(t)
	}
}

// Peer is a connection to a perf server: an engine endpoint for the data
// and the control channel for everything else.
type Peer struct {
	Addr   string      // "unix:PATH", "tcp:HOST:PORT" or "rdma:HOST:PORT" (the control channel)
	PID    int         // the server's pid
	Env    Environment // the server's environment and devices
	Device int         // the server's Gaudi that holds its Gaudi buffers
	// EngineAddr is the server engine's address: the socket path (ipc) or
	// HOST:PORT (tcp: the control channel's host, the port the server
	// gave in its hello).
	EngineAddr string

	eng *engine.Engine
	ep  *engine.Endpoint
	mu  sync.Mutex // one control request at a time
	ctl *ctlConn
}

// DialPeer connects to the perf server listening at path (the engine
// socket; the control socket is path + CtlSuffix). A server busy with
// another client refuses.
func DialPeer(ctx context.Context, eng *engine.Engine, path string) (_ *Peer, err error) {
	p := &Peer{Addr: "unix:" + path, EngineAddr: path, eng: eng}
	if err := checkSocketPath(path); err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path+CtlSuffix)
	if err != nil {
		return nil, fmt.Errorf("connect to the perf server at unix:%s: %w (is 'gxfer perf -server -x unix:%s' running?)", path, unwrapOp(err), path)
	}
	uc := c.(*net.UnixConn)
	p.ctl = newCtlConn(uc, "the perf server at unix:"+path)
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	if cred, err := peerUcred(uc); err != nil {
		return nil, fmt.Errorf("perf server at unix:%s: peer credentials: %w", path, err)
	} else if int(cred.Uid) != os.Getuid() {
		return nil, fmt.Errorf("perf server at unix:%s runs as uid %d, not %d: refused", path, cred.Uid, os.Getuid())
	}
	if _, err := p.hello(ctx); err != nil {
		return nil, err
	}
	if p.ep, err = eng.Dial(ctx, "unix", path); err != nil {
		return nil, err
	}
	if _, err := p.call(ctx, &ctlMsg{Op: opAttach}, attachTimeout); err != nil {
		return nil, err
	}
	return p, nil
}

// DialPeerTCP connects to the perf server whose control channel listens
// at addr (HOST:PORT), over the tcp transport: the server's hello names
// its engine's port, and the engine endpoint is dialed at the host the
// control channel reached. A server busy with another client refuses.
func DialPeerTCP(ctx context.Context, eng *engine.Engine, addr string) (*Peer, error) {
	return dialPeerNet(ctx, eng, addr, "tcp")
}

// DialPeerRDMA is DialPeerTCP over the rdma transport: the control
// channel and the engine's connection setup are TCP, and the engine
// endpoint is dialed with engine.TransportRDMA, so that its Puts and Gets
// are RDMA writes and reads. eng must have an RDMA device (eng.RDMA()),
// and so must the server's engine.
func DialPeerRDMA(ctx context.Context, eng *engine.Engine, addr string) (*Peer, error) {
	if info := eng.RDMA(); !info.Available {
		return nil, fmt.Errorf("transport rdma: %s", info.Reason)
	}
	return dialPeerNet(ctx, eng, addr, "rdma")
}

func dialPeerNet(ctx context.Context, eng *engine.Engine, addr, transport string) (_ *Peer, err error) {
	p := &Peer{Addr: transport + ":" + addr, eng: eng}
	if err := CheckDialAddr(addr); err != nil {
		return nil, fmt.Errorf("bad perf server address %s:%s: %w", transport, addr, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to the perf server at %s:%s: %w (is 'gxfer perf -server -x %s:%s' running?)", transport, addr, unwrapOp(err), transport, addr)
	}
	p.ctl = newCtlConn(c, "the perf server at "+transport+":"+addr)
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	r, err := p.hello(ctx)
	if err != nil {
		return nil, err
	}
	if r.Port <= 0 || r.Port > 65535 {
		return nil, fmt.Errorf("perf server at %s:%s gave no engine port (is it serving over tcp or rdma?)", transport, addr)
	}
	serves := r.Transport
	if serves == "" {
		serves = "tcp"
	}
	if serves != transport {
		return nil, fmt.Errorf("perf server at %s:%s serves %s, not %s (give the client -x %s:%s, or start the server with -x %s:...)",
			transport, addr, serves, transport, serves, addr, transport)
	}
	kind := engine.TransportTCP
	if transport == "rdma" {
		kind = engine.TransportRDMA
	}
	host := c.RemoteAddr().(*net.TCPAddr).IP.String()
	p.EngineAddr = net.JoinHostPort(host, strconv.Itoa(r.Port))
	if p.ep, err = eng.Dial(ctx, "tcp", p.EngineAddr, engine.WithTransport(kind)); err != nil {
		return nil, fmt.Errorf("perf server at %s:%s: engine at %s: %w", transport, addr, p.EngineAddr, err)
	}
	if got := p.ep.Transport(); got != kind {
		return nil, fmt.Errorf("perf server at %s:%s: the engine endpoint is %s, want %s", transport, addr, got, kind)
	}
	if _, err := p.call(ctx, &ctlMsg{Op: opAttach}, attachTimeout); err != nil {
		return nil, err
	}
	return p, nil
}

// hello opens the control session: the server's pid, environment and
// device.
func (p *Peer) hello(ctx context.Context) (*ctlMsg, error) {
	r, err := p.ctl.call(ctx, &ctlMsg{Op: opHello, Version: ctlVersion, PID: os.Getpid()}, helloTimeout)
	if err != nil {
		return nil, err
	}
	if r.Version != ctlVersion || r.Env == nil {
		return nil, fmt.Errorf("perf server at %s speaks control version %d, want %d", p.Addr, r.Version, ctlVersion)
	}
	p.PID, p.Env, p.Device = r.PID, *r.Env, r.Device
	return r, nil
}

// unwrapOp drops the *net.OpError wrapping ("dial unix /x.ctl: connect:
// no such file or directory" -> the cause) since the caller names the path.
func unwrapOp(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}

// Endpoint is the engine endpoint to the server.
func (p *Peer) Endpoint() *engine.Endpoint { return p.ep }

// Transport is the transport of the engine endpoint: "ipc", "tcp" or
// "rdma".
func (p *Peer) Transport() string {
	if p.ep != nil {
		return p.ep.Transport().String()
	}
	for _, t := range []string{"tcp", "rdma"} {
		if strings.HasPrefix(p.Addr, t+":") {
			return t
		}
	}
	return "ipc"
}

// String names the server: "unix:/tmp/s (pid 123)", "tcp:10.0.0.1:5000 (pid 123)".
func (p *Peer) String() string { return fmt.Sprintf("%s (pid %d)", p.Addr, p.PID) }

// Close says goodbye and closes the endpoint and the control connection.
func (p *Peer) Close() error {
	var errs []error
	if p.ctl != nil && p.ep != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := p.call(ctx, &ctlMsg{Op: opBye}, 5*time.Second); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if p.ep != nil {
		errs = append(errs, p.ep.Close())
	}
	if p.ctl != nil {
		if err := p.ctl.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *Peer) call(ctx context.Context, m *ctlMsg, timeout time.Duration) (*ctlMsg, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctl.call(ctx, m, timeout)
}

// DeviceInfo describes the server's Gaudi used for its Gaudi buffers.
func (p *Peer) DeviceInfo() (DeviceEnv, bool) {
	for _, d := range p.Env.Devices {
		if d.Index == p.Device {
			return d, true
		}
	}
	return DeviceEnv{}, false
}

func (p *Peer) checkDevice() error {
	if len(p.Env.Devices) == 0 {
		return fmt.Errorf("the peer %s has no Gaudi device open", p)
	}
	if _, ok := p.DeviceInfo(); !ok {
		return fmt.Errorf("the peer %s has no Gaudi device %d", p, p.Device)
	}
	return nil
}

// alloc has the server allocate a buffer, fill it and export it.
func (p *Peer) alloc(ctx context.Context, mem Mem, size int, seed byte, complement bool) (uint64, engine.RemoteKey, error) {
	r, err := p.call(ctx, &ctlMsg{Op: opAlloc, Mem: mem, Size: size, Seed: seed, Complement: complement}, ctlTimeout)
	if err != nil {
		return 0, engine.RemoteKey{}, err
	}
	k, err := engine.ParseRemoteKey(r.Key)
	if err != nil {
		return 0, engine.RemoteKey{}, fmt.Errorf("key from %s: %w", p, err)
	}
	if k.Len() != size {
		return 0, engine.RemoteKey{}, fmt.Errorf("key from %s is for %d bytes, want %d", p, k.Len(), size)
	}
	return r.Buf, k, nil
}

func (p *Peer) free(ctx context.Context, id uint64) error {
	_, err := p.call(ctx, &ctlMsg{Op: opFree, Buf: id}, ctlTimeout)
	return err
}

// verify has the server check its buffer against the pattern.
func (p *Peer) verify(ctx context.Context, id uint64, seed byte) error {
	_, err := p.call(ctx, &ctlMsg{Op: opVerify, Buf: id, Seed: seed}, ctlTimeout)
	return err
}

// preImport maps the server's host buffer into this process now, as
// ucx_perftest unpacks its remote keys before measuring: a Get of a few
// bytes into a scratch buffer goes through the IPC handle cache, which
// keeps the mapping for the measured operations.
func (p *Peer) preImport(ctx context.Context, rk engine.RemoteKey) (err error) {
	if rk.Location().IsGaudi() {
		return nil // the peer's engine moves its Gaudi memory: nothing to map here
	}
	n := min(8, rk.Len())
	scratch, err := p.eng.Alloc(n, engine.Host)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, scratch.Free()) }()
	if err := p.ep.GetSync(ctx, scratch.All(), rk.Slice(0, n)); err != nil {
		return fmt.Errorf("map the peer's buffer: %w", err)
	}
	return nil
}

// seedFor derives a pattern seed from the test and size, so that a
// stale buffer of another test or size cannot pass verification.
func seedFor(name string, size int, salt byte) byte {
	s := byte(size*7) ^ salt
	for _, c := range []byte(name) {
		s = s*31 + c
	}
	return s
}

func prepareIPC(name string, put bool) func(ctx context.Context, env *Env, size int) (Workload, error) {
	return func(ctx context.Context, env *Env, size int) (Workload, error) {
		if env.Peer == nil {
			return nil, errors.New("no peer")
		}
		if name == "put_lat" && env.local() == Host && env.remote() == Host {
			return newPingPong(ctx, env, size)
		}
		return newRMA(ctx, env, size, put, seedFor(name, size, 0x5a))
	}
}

// rmaWork runs Puts or Gets between one local buffer and one buffer of
// the peer, both allocated once per size and reused by every iteration.
type rmaWork struct {
	p     *Peer
	eng   *engine.Engine
	put   bool
	seed  byte
	local *engine.Buffer
	ls    engine.Slice
	rid   uint64 // the server's buffer
	rk    engine.RemoteKey
	rlive bool
	bind  *engine.Binding // host to host: checked and imported once
}

// resolvedOK is returned for operations that completed in the caller.
var resolvedOK = cq.Resolved(nil)

// bind returns a Binding for host-to-host transfers, nil otherwise (Gaudi
// memory on either side, or an endpoint that cannot bind, goes through
// Put/Get).
func bind(ctx context.Context, ep *engine.Endpoint, local engine.Slice, rk engine.RemoteKey) (*engine.Binding, error) {
	if local.Buffer().Location().IsGaudi() || rk.Location().IsGaudi() {
		return nil, nil
	}
	b, err := ep.Bind(ctx, local, rk)
	if errors.Is(err, engine.ErrNotSupported) {
		return nil, nil
	}
	return b, err
}

func newRMA(ctx context.Context, env *Env, size int, put bool, seed byte) (_ Workload, err error) {
	w := &rmaWork{p: env.Peer, eng: env.Engine, put: put, seed: seed}
	defer func() {
		if err != nil {
			_ = w.Close()
		}
	}()
	if w.local, err = w.eng.Alloc(size, location(env.local(), env)); err != nil {
		return nil, fmt.Errorf("allocate %s local buffer: %w", FormatSize(size), err)
	}
	w.ls = w.local.All()
	// The source holds the pattern, the destination its complement.
	if err := fillBuffer(ctx, w.eng, w.local, seed, !put); err != nil {
		return nil, fmt.Errorf("fill local buffer: %w", err)
	}
	if w.rid, w.rk, err = w.p.alloc(ctx, env.remote(), size, seed, put); err != nil {
		return nil, err
	}
	w.rlive = true
	if err := w.p.preImport(ctx, w.rk); err != nil {
		return nil, err
	}
	if w.bind, err = bind(ctx, w.p.ep, w.ls, w.rk); err != nil {
		return nil, err
	}
	return w, nil
}

// Submit implements Workload.
func (w *rmaWork) Submit(ctx context.Context, n int) *engine.Future {
	if n != 1 {
		return cq.Resolved(fmt.Errorf("%w: batches of peer operations", engine.ErrNotSupported))
	}
	if w.bind != nil {
		var err error
		if w.put {
			err = w.bind.Put()
		} else {
			err = w.bind.Get()
		}
		if err != nil {
			return cq.Resolved(err)
		}
		return resolvedOK
	}
	if w.put {
		return w.p.ep.Put(ctx, w.ls, w.rk)
	}
	return w.p.ep.Get(ctx, w.ls, w.rk)
}

// CanStream implements streamer: host-to-host operations run through a
// Binding, in the caller.
func (w *rmaWork) CanStream() bool { return w.bind != nil }

// Stream implements streamer: n Puts (or Gets) back to back through the
// binding, each a copy of the whole message into (out of) the peer's
// memory.
func (w *rmaWork) Stream(ctx context.Context, n int) error {
	if w.put {
		return w.bind.PutN(n)
	}
	return w.bind.GetN(n)
}

// Flush implements flusher: the binding's operations still in flight
// (RDMA) are done on return.
func (w *rmaWork) Flush() error { return w.bind.Flush() }

// Verify implements Workload: the destination, here or at the peer, holds
// the source's pattern.
func (w *rmaWork) Verify(ctx context.Context) error {
	if w.put {
		return w.p.verify(ctx, w.rid, w.seed)
	}
	return checkBuffer(ctx, w.eng, w.local, w.seed, span{}, "local destination")
}

// Close implements Workload.
func (w *rmaWork) Close() error {
	var errs []error
	if w.bind != nil {
		errs = append(errs, w.bind.Close())
	}
	if w.local != nil {
		errs = append(errs, w.local.Free())
	}
	if w.rlive {
		ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
		errs = append(errs, w.p.free(ctx, w.rid))
		cancel()
	}
	return errors.Join(errs...)
}

// stopSeq is the sequence number that ends the server's ping-pong
// responder.
const stopSeq = ^uint64(0)

// pingTimeout bounds one ping-pong round: a peer that does not answer
// within it has failed.
var pingTimeout = 10 * time.Second

// clockSpins: a polling loop reads the clock once every clockSpins+1
// spins (see spinCheck).
const clockSpins = 0xffff

// pingPong is put_lat between host buffers, like ucx_perftest's: the
// client Puts its send buffer into the server's receive buffer; the last
// aligned 8 bytes carry the round's sequence number. The server polls its
// receive buffer, and on the expected number Puts its send buffer (same
// sequence) into the client's receive buffer, which the client polls.
// Both sides spin on atomic loads: no wakeup is involved.
type pingPong struct {
	p      *Peer
	eng    *engine.Engine
	ep     *engine.Endpoint
	size   int
	seqOff int

	send, recv   *engine.Buffer // this side's
	sendS        engine.Slice
	sendSeq      *uint64
	recvSeq      *uint64
	rid          uint64 // the server's receive buffer
	rk           engine.RemoteKey
	rlive        bool
	running      bool // the server's responder is running
	seq          uint64
	seedC, seedS byte            // patterns of the client's and the server's send buffers
	bind         *engine.Binding // host to host: checked and imported once
	wait         *landWait
}

func newPingPong(ctx context.Context, env *Env, size int) (_ Workload, err error) {
	if size < 8 {
		return nil, fmt.Errorf("put_lat needs messages of at least 8 bytes (they carry the ping-pong sequence number), got %d", size)
	}
	w := &pingPong{p: env.Peer, eng: env.Engine, ep: env.Peer.ep, size: size, seqOff: (size - 8) &^ 7,
		seedC: seedFor("put_lat", size, 0x11), seedS: seedFor("put_lat", size, 0x22), wait: newLandWait(env.Peer.eng, env.Peer.ep)}
	defer func() {
		if err != nil {
			_ = w.Close()
		}
	}()
	if w.send, err = w.eng.Alloc(size, engine.Host); err != nil {
		return nil, fmt.Errorf("allocate %s send buffer: %w", FormatSize(size), err)
	}
	if w.recv, err = w.eng.Alloc(size, engine.Host); err != nil {
		return nil, fmt.Errorf("allocate %s receive buffer: %w", FormatSize(size), err)
	}
	fillPattern(w.send.Bytes(), w.seedC, false)
	fillPattern(w.recv.Bytes(), w.seedS, true)
	w.sendS = w.send.All()
	w.sendSeq = (*uint64)(unsafe.Pointer(&w.send.Bytes()[w.seqOff]))
	w.recvSeq = (*uint64)(unsafe.Pointer(&w.recv.Bytes()[w.seqOff]))
	atomic.StoreUint64(w.sendSeq, 0)
	atomic.StoreUint64(w.recvSeq, 0)
	if w.rid, w.rk, err = w.p.alloc(ctx, Host, size, w.seedC, true); err != nil {
		return nil, err
	}
	w.rlive = true
	if err := w.p.preImport(ctx, w.rk); err != nil {
		return nil, err
	}
	if w.bind, err = bind(ctx, w.ep, w.sendS, w.rk); err != nil {
		return nil, err
	}
	key, err := w.recv.Export()
	if err != nil {
		return nil, fmt.Errorf("export the receive buffer: %w", err)
	}
	if _, err := w.p.call(ctx, &ctlMsg{Op: opPingPong, Buf: w.rid, Key: key.Bytes(), Size: size, Seed: w.seedS,
		HasSeq: true, SeqOff: w.seqOff}, ctlTimeout); err != nil {
		return nil, err
	}
	w.running = true
	return w, nil
}

// Submit implements Workload; the runner calls RoundTrip instead.
func (w *pingPong) Submit(ctx context.Context, n int) *engine.Future {
	if n != 1 {
		return cq.Resolved(fmt.Errorf("%w: batches of ping-pong rounds", engine.ErrNotSupported))
	}
	return cq.Resolved(w.RoundTrip(ctx))
}

// RoundTrip runs one ping-pong round: Put, then poll until the peer's
// answer lands in the receive buffer.
func (w *pingPong) RoundTrip(ctx context.Context) error {
	w.seq++
	want := w.seq
	w.wait.round(want)
	// The send buffer is this goroutine's (the Put reads it here, or on a
	// worker after a queue handoff): a plain store, no locked instruction
	// on the critical path. Only the polled receive buffer needs atomics.
	*w.sendSeq = want
	if w.bind == nil {
		return w.roundTripFuture(ctx, want)
	}
	// A Put into the peer's host memory through a binding is done on
	// return.
	if err := w.bind.Put(); err != nil {
		return err
	}
	return w.poll(ctx, want)
}

// poll spins until the answer of round want has landed.
func (w *pingPong) poll(ctx context.Context, want uint64) error {
	var t0 time.Time
	for spins := 1; atomic.LoadUint64(w.recvSeq) != want; spins++ {
		if spins&0xfff != 0 {
			continue
		}
		if err := w.check(ctx, &t0, spins, want); err != nil {
			return err
		}
	}
	return nil
}

// roundTripFuture is a round whose Put is a future (tcp; ipc without a
// binding): the round is over once the answer has landed in the receive
// buffer and the Put has completed (the send buffer is then ours again).
// The Put's completion is not waited for before polling: over tcp it
// comes back with the answer.
func (w *pingPong) roundTripFuture(ctx context.Context, want uint64) error {
	f := w.ep.Put(ctx, w.sendS, w.rk)
	var t0 time.Time
	for spins := 1; ; spins++ {
		if atomic.LoadUint64(w.recvSeq) == want && f.IsDone() {
			return f.Err()
		}
		if f.IsDone() && f.Err() != nil {
			return f.Err()
		}
		w.wait.idle(spins)
		if spins&0xfff != 0 {
			continue
		}
		if err := w.check(ctx, &t0, spins, want); err != nil {
			if !f.IsDone() {
				<-f.Done() // the send buffer is in use until it is done
			}
			return err
		}
	}
}

// check runs every 4096 polls of a round: timeout, cancellation and the
// endpoint's failure end it.
func (w *pingPong) check(ctx context.Context, t0 *time.Time, spins int, want uint64) error {
	if err := spinCheck(t0, spins, w.wait.oneP); err != nil {
		return fmt.Errorf("ping-pong round %d: no answer from %s: %w", want, w.p, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-w.ep.Done():
		return fmt.Errorf("ping-pong round %d: %w", want, w.ep.Err())
	default:
	}
	return nil
}

// landWait is how a ping-pong side polls for bytes the peer puts into its
// memory. Over ipc the peer's process stores them itself: spinning on
// the memory is all it takes. Over tcp this process's engine lands them
// from its socket, on its reader goroutine, parked in the Go netpoller
// between frames: the poller parks for a microsecond between looks, so
// that the scheduler polls the network and the reader lands the bytes,
// which the poller then sees in memory. (Spinning instead would keep the
// reader from running on a process with one P, as runtime.Gosched does
// not poll the network, and with more Ps it takes the core the reader's
// thread needs: measured 2.4 to 5 ms per round on 2 CPUs against 0.1 ms
// parked.)
//
// While the engine's reader polls its socket (Config.TCPReadSpin after
// each frame, yielding between polls) this side yields between looks
// instead of parking, so the two take turns on the thread and neither
// sleeps; past that window it parks again (a yield alone would never let
// the scheduler poll the network for a parked reader).
//
// Over rdma the NIC writes the peer's bytes straight into the memory: no
// goroutine of this process lands them and no socket read is waited for,
// so this side spins on the memory as over ipc. The only goroutine it
// needs to let run is the engine's completion queue's, which completes
// this side's own Put: when that one polls (Config.RDMA.CQBusyPoll or
// CQSpin) it is runnable and a yield lets it run, every 64 looks when the
// process has a single P (each yield runs the scheduler, which reads the
// clock, slow under QEMU TCG; on rxe a yield every look measured the same
// within noise); when it sleeps in the netpoller (the default) an idle
// P's thread wakes it, or with a single P a short park lets the scheduler
// poll the network.
type landWait struct {
	// oneP: this process has a single P. Only then do the long polling
	// loops yield now and then (spinCheck), so that the engine's
	// goroutines can run: with more Ps they run on another, and a yield
	// would wake an idle P's thread for nothing (runtime.Gosched wakes
	// one), which takes a core from the peer or the NIC's software.
	oneP    bool
	park    bool
	yield   time.Duration // how long after the last progress to yield
	since   time.Time
	yielded time.Time // the last yield of round
	mask    int       // spinning: yield (or nap) when spins&mask == 0
	nap     bool      // spinning: park for a microsecond instead of yielding
}

func newLandWait(eng *engine.Engine, ep *engine.Endpoint) *landWait {
	l := &landWait{park: ep.Transport() == engine.TransportTCP, mask: 0xff, oneP: runtime.GOMAXPROCS(0) == 1}
	if l.park {
		l.yield = max(eng.Config().TCPReadSpin, 0)
	}
	if ep.Transport() == engine.TransportRDMA && runtime.GOMAXPROCS(0) == 1 {
		if c := eng.Config().RDMA; c.CQBusyPoll || c.CQSpin > 0 {
			l.mask = 0x3f
		} else {
			l.mask, l.nap = 0x3f, true
		}
	}
	return l
}

// round is called at each ping-pong round. A polling loop that never
// enters the scheduler is preempted by the runtime's monitor every 10 ms,
// and when that lands during a cgo call (an RDMA post) the monitor also
// takes the P away and then watches at its shortest period (20 µs) for a
// millisecond or more: about 3000 thread wake-ups a second measured in
// the rxe VM, CPU the peer and the NIC's software need. One yield every
// yieldEvery keeps that from happening, at the cost of one wake-up of an
// idle P's thread.
func (l *landWait) round(n uint64) {
	if n&63 != 0 {
		return
	}
	if now := time.Now(); now.Sub(l.yielded) >= yieldEvery {
		l.yielded = now
		runtime.Gosched()
	}
}

// yieldEvery is how often a ping-pong side yields (see landWait.round).
const yieldEvery = 2 * time.Millisecond

// idle is called after the spins-th poll that found nothing new.
func (l *landWait) idle(spins int) {
	switch {
	case l.park && l.yield > 0:
		if spins == 1 {
			l.since = time.Now()
		}
		if time.Since(l.since) < l.yield {
			runtime.Gosched()
			return
		}
		time.Sleep(time.Microsecond)
	case l.park:
		time.Sleep(time.Microsecond)
	case spins&l.mask == 0:
		if l.nap {
			time.Sleep(time.Microsecond)
		} else {
			runtime.Gosched()
		}
	}
}

// waitFuture returns f's result, waiting only when it is not done yet.
func waitFuture(ctx context.Context, f *engine.Future) error {
	if !f.IsDone() {
		if err := f.Wait(ctx); err != nil && !f.IsDone() {
			<-f.Done() // the buffers are in use until it is done
			return err
		}
	}
	return f.Err()
}

// spinCheck runs every 4096 spins of a polling loop: it fails once the
// loop has waited pingTimeout, and, when the process has a single P
// (oneP), after the first 64K spins yields the P now and then, so that
// goroutines of this process (the engine's) can run. It reads the clock
// only every 64K spins (the wait starts counting there): a read can cost
// microseconds (3.6 us in a QEMU TCG guest), and most rounds end sooner.
func spinCheck(t0 *time.Time, spins int, oneP bool) error {
	if oneP && spins >= 1<<16 {
		runtime.Gosched()
	}
	if spins&clockSpins != 0 {
		return nil
	}
	if t0.IsZero() {
		*t0 = time.Now()
		return nil
	}
	if time.Since(*t0) > pingTimeout {
		return fmt.Errorf("nothing within %v", pingTimeout)
	}
	return nil
}

// stop ends the server's responder and returns its verdict on the bytes
// it received.
func (w *pingPong) stop(ctx context.Context) error {
	if !w.running {
		return nil
	}
	w.running = false
	*w.sendSeq = stopSeq
	perr := w.ep.PutSync(ctx, w.sendS, w.rk)
	r, err := w.p.call(ctx, &ctlMsg{Op: opPingPongEnd, Seq: w.seq}, ctlTimeout)
	if err := errors.Join(perr, err); err != nil {
		return err
	}
	if r.Rounds != w.seq {
		return fmt.Errorf("the peer answered %d ping-pong rounds, want %d", r.Rounds, w.seq)
	}
	return nil
}

// Verify implements Workload: the server checked the bytes it received;
// the client checks the answer it received last.
func (w *pingPong) Verify(ctx context.Context) error {
	if err := w.stop(ctx); err != nil {
		return err
	}
	if got := atomic.LoadUint64(w.recvSeq); got != w.seq {
		return fmt.Errorf("verification failed: the last answer carries sequence %d, want %d", got, w.seq)
	}
	return checkPattern(w.recv.Bytes(), w.seedS, span{w.seqOff, 8}, "local receive buffer")
}

// Close implements Workload.
func (w *pingPong) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
	defer cancel()
	errs := []error{w.stop(ctx)}
	if w.bind != nil {
		errs = append(errs, w.bind.Close())
	}
	for _, b := range []*engine.Buffer{w.send, w.recv} {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	if w.rlive {
		errs = append(errs, w.p.free(ctx, w.rid))
	}
	return errors.Join(errs...)
}
