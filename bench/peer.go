package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/engine"
)

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
	// last is when the last control request ended (UnixNano); the
	// keepalive pings when it is older than keepaliveEvery.
	last     atomic.Int64
	kaCancel context.CancelFunc // called by Close: the keepalive and its ping in flight end
	kaDone   chan struct{}      // closed as it has ended
	// kaCut: Close cut the keepalive's ping in flight, which left the
	// control connection unusable (set before kaDone is closed).
	kaCut bool
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
	p.keepalive(keepaliveEvery)
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
	p.keepalive(keepaliveEvery)
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

// keepalive pings the server whenever the control channel has carried no
// request for every (the client measures on the engine endpoint
// meanwhile): the server ends a session silent for sessionIdleTimeout.
// Close stops it, and ends a ping in flight at once.
func (p *Peer) keepalive(every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	p.kaCancel, p.kaDone = cancel, make(chan struct{})
	go func() {
		defer close(p.kaDone)
		t := time.NewTicker(every / 4)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if time.Since(time.Unix(0, p.last.Load())) < every {
				continue
			}
			// A ping the server does not answer leaves the next request to
			// report the broken session.
			if _, err := p.call(ctx, &ctlMsg{Op: opPing}, helloTimeout); err != nil {
				p.kaCut = ctx.Err() != nil && p.ctl.aborted.Load()
				return
			}
		}
	}()
}

// Close says goodbye and closes the endpoint and the control connection.
// A keepalive ping in flight is cut short; the connection then cannot carry
// the bye (the ping's late reply could come first), and the server sees the
// connection close without one.
func (p *Peer) Close() error {
	if p.kaCancel != nil {
		p.kaCancel()
		<-p.kaDone
		p.kaCancel = nil
	}
	var errs []error
	if p.ctl != nil && p.ep != nil && !p.kaCut {
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
	defer func() { p.last.Store(time.Now().UnixNano()) }()
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
