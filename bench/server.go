package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gxfer/gxfer/engine"
)

// ServerConfig configures a perf server.
type ServerConfig struct {
	// Path is the engine socket; the control socket is Path + CtlSuffix.
	Path string
	// TCP, if set, makes the server serve over the tcp transport instead
	// of ipc (Path is then unused): the control channel listens at TCP
	// (HOST:PORT; port 0 picks one, see Addr) and the engine on an
	// ephemeral port of the same host, which the hello reply gives the
	// client. Anyone who can reach the port may connect: unlike the unix
	// sockets (0600, peer uid checked), there is no credential check.
	TCP string
	// RDMA, with TCP, serves the rdma transport: the control channel and
	// the engine's connection setup as over tcp, and clients' endpoints
	// must be RDMA ones (the engine needs an RDMA device and the default
	// Config.Transport, TransportAuto, so that its listener offers RDMA).
	RDMA bool
	// Device is the Gaudi that holds the server's Gaudi buffers.
	Device int
	// Once: serve one client, then Serve returns.
	Once bool
	// Log receives one line per event (client connected, done, refused);
	// nil: silent.
	Log io.Writer
}

// Server is the peer of the ipc and tcp tests, like ucx_perftest without
// a host argument: it listens, and for each client (one at a time) allocates,
// fills, exports and verifies buffers on request, and answers ping-pongs.
type Server struct {
	eng  *engine.Engine
	cfg  ServerConfig
	ln   *engine.Listener
	ctl  net.Listener
	tcp  bool
	rdma bool

	mu     sync.Mutex
	active *session // the client being served
	// freed is closed when active's slot is freed (made when a session
	// takes it).
	freed chan struct{}
	// pending are the connections that have not said hello yet: they
	// hold nothing (the one-client slot is taken at a hello), and Close
	// ends them. At most maxPending of them, maxPendingPerSource from
	// one source (see admitPending).
	pending map[*session]struct{}
	served  bool
	closed  bool
	wg      sync.WaitGroup
	logMu   sync.Mutex

	accepted  uint64 // connections accepted: the order of pending ones (under mu)
	evictions uint64 // pending ones closed to make room (under mu)

	closeOnce sync.Once
	closeErr  error

	// helloWait bounds the wait for a client's hello, idleWait the wait
	// for each later request, and maxBytes the bytes a session may
	// allocate (helloTimeout, sessionIdleTimeout, maxSessionBytes; tests change
	// them before Serve).
	helloWait time.Duration
	idleWait  time.Duration
	maxBytes  int
	// cleanupHook, when set (tests), runs as a session's cleanup begins.
	cleanupHook func()
}

// leaveWait bounds how long a hello waits for the session of a client
// that said bye to finish its cleanup (serveConn).
const leaveWait = 5 * time.Second

// Listen starts a perf server on eng: it creates the engine socket and the
// control socket (ipc; a stale socket file, nothing listening, is
// replaced, a live one is an error), or with cfg.TCP the control channel's
// TCP listener and the engine's, on an ephemeral port of the same host.
func Listen(eng *engine.Engine, cfg ServerConfig) (_ *Server, err error) {
	if n := eng.NumDevices(); n > 0 && (cfg.Device < 0 || cfg.Device >= n) {
		return nil, fmt.Errorf("perf server: device %d does not exist (%d open)", cfg.Device, n)
	}
	if cfg.RDMA && cfg.TCP == "" {
		return nil, errors.New("perf server: rdma needs the control channel's address (ServerConfig.TCP)")
	}
	if cfg.TCP != "" {
		return listenTCP(eng, cfg)
	}
	if err := checkSocketPath(cfg.Path); err != nil {
		return nil, fmt.Errorf("perf server: %w", err)
	}
	for _, p := range []string{cfg.Path, cfg.Path + CtlSuffix} {
		if err := removeStale(p); err != nil {
			return nil, err
		}
	}
	s := &Server{eng: eng, cfg: cfg, helloWait: helloTimeout, idleWait: sessionIdleTimeout, maxBytes: maxSessionBytes}
	if s.ln, err = eng.Listen("unix", cfg.Path); err != nil {
		return nil, fmt.Errorf("perf server: %w", err)
	}
	defer func() {
		if err != nil {
			_ = s.ln.Close()
		}
	}()
	ctlPath := cfg.Path + CtlSuffix
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: ctlPath, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("perf server: listen %s: %w", ctlPath, unwrapOp(err))
	}
	if err := os.Chmod(ctlPath, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("perf server: %w", err)
	}
	s.ctl = l
	return s, nil
}

// listenTCP starts a perf server over tcp: the control channel at
// cfg.TCP, the engine on an ephemeral port of the address bound.
func listenTCP(eng *engine.Engine, cfg ServerConfig) (_ *Server, err error) {
	scheme := "tcp"
	if cfg.RDMA {
		scheme = "rdma"
		if info := eng.RDMA(); !info.Available {
			return nil, fmt.Errorf("perf server: transport rdma: %s", info.Reason)
		}
		if k := eng.Config().Transport; k == engine.TransportTCP {
			return nil, errors.New("perf server: transport rdma: the engine is configured for tcp only (Config.Transport)")
		}
	}
	if err := checkHostPort(cfg.TCP); err != nil {
		return nil, fmt.Errorf("perf server: %s:%s: %w", scheme, cfg.TCP, err)
	}
	l, err := net.Listen("tcp", cfg.TCP)
	if err != nil {
		return nil, fmt.Errorf("perf server: listen %s:%s: %w", scheme, cfg.TCP, unwrapOp(err))
	}
	defer func() {
		if err != nil {
			_ = l.Close()
		}
	}()
	s := &Server{eng: eng, cfg: cfg, ctl: l, tcp: true, rdma: cfg.RDMA, helloWait: helloTimeout, idleWait: sessionIdleTimeout, maxBytes: maxSessionBytes}
	ip := l.Addr().(*net.TCPAddr).IP.String()
	if s.ln, err = eng.Listen("tcp", net.JoinHostPort(ip, "0")); err != nil {
		return nil, fmt.Errorf("perf server: engine: %w", err)
	}
	return s, nil
}

// removeStale removes a socket file nobody listens on. Anything else at
// path is left alone (and Listen then fails with a clear error).
func removeStale(path string) error {
	st, err := os.Lstat(path)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return nil
	}
	for _, network := range []string{"unixpacket", "unix"} {
		c, err := net.DialTimeout(network, path, time.Second)
		if err == nil {
			_ = c.Close()
			return fmt.Errorf("perf server: %s is in use (another server is listening there)", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EPROTOTYPE) {
			return nil
		}
	}
	_ = os.Remove(path)
	return nil
}

// Addr is the address clients give to -x: "unix:PATH", or
// "tcp:HOST:PORT" ("rdma:HOST:PORT") with the port bound.
func (s *Server) Addr() string {
	if s.tcp {
		return s.Transport() + ":" + s.ctl.Addr().String()
	}
	return "unix:" + s.cfg.Path
}

// EngineAddr is the engine's listening address: the socket path, or the
// HOST:PORT bound (tcp).
func (s *Server) EngineAddr() string { return s.ln.Addr() }

// Transport is the transport the server serves: "ipc", "tcp" or "rdma".
func (s *Server) Transport() string {
	if s.rdma {
		return "rdma"
	}
	if s.tcp {
		return "tcp"
	}
	return "ipc"
}

// enginePort is the engine's TCP port.
func (s *Server) enginePort() int {
	_, port, err := net.SplitHostPort(s.ln.Addr())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(port)
	return n
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Log == nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, format+"\n", args...)
}

// Serve serves clients until ctx ends or Close is called (then it returns
// nil), or, with Once, until the first client is done (then it returns
// that session's error). A second client while one is served is refused.
// A connection becomes the client served only at its hello: until then
// (helloWait at most) it holds nothing, so that a connection that says
// nothing keeps no client out.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer stop()
	defer s.Close()
	var once struct {
		sync.Mutex
		err error
	}
	for {
		c, err := s.ctl.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				break
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.logf("# accept: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		// Over ipc the client's pid and uid come from the socket; over tcp
		// the pid from its hello, and anyone who can connect is served.
		pid, who := 0, "client at "+c.RemoteAddr().String()
		if uc, ok := c.(*net.UnixConn); ok {
			cred, err := peerUcred(uc)
			if err == nil && int(cred.Uid) != os.Getuid() {
				err = fmt.Errorf("uid %d is not ours", cred.Uid)
			}
			if err != nil {
				s.logf("# refused a control connection: %v", err)
				_ = c.Close()
				continue
			}
			pid, who = int(cred.Pid), fmt.Sprintf("client pid %d", cred.Pid)
		}
		sess := &session{s: s, c: newCtlConn(c, who), pid: pid, who: who, bufs: map[uint64]*srvBuf{}}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			break
		}
		if s.pending == nil {
			s.pending = map[*session]struct{}{}
		}
		note := s.admitPending(sess, pendingSource(c, pid))
		s.mu.Unlock()
		if note != "" {
			s.logf("%s", note)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			took, err := s.serveConn(ctx, sess)
			if err != nil {
				s.logf("# %s: %v", sess.who, err)
			} else if took {
				s.logf("# %s done (%d requests)", sess.who, sess.requests)
			}
			if took && s.cfg.Once && sess.greeted {
				once.Lock()
				once.err = err
				once.Unlock()
				_ = s.Close()
			}
		}()
	}
	s.wg.Wait()
	once.Lock()
	defer once.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	return once.err
}

// serveConn waits for the first message of a connection (helloWait at
// most) and serves it: a hello takes the one-client slot if it is free
// (took), else it is refused; anything else ends it as session.run does.
func (s *Server) serveConn(ctx context.Context, sess *session) (took bool, err error) {
	first, rerr := sess.c.recv(s.helloWait)
	s.mu.Lock()
	delete(s.pending, sess)
	if s.closed || sess.evicted {
		s.mu.Unlock()
		_ = sess.c.Close()
		return false, nil
	}
	if rerr == nil && first.Op == opHello && s.active != nil && s.active.leaving && !s.cfg.Once {
		// The client being served said bye and has gone: its session is
		// freeing what it held. A client that comes right after (the
		// next command of a script) waits for that instead of being
		// refused as if the server were busy.
		freed := s.freed
		s.mu.Unlock()
		t := time.NewTimer(leaveWait)
		select {
		case <-freed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = sess.c.Close()
			return false, nil
		}
	}
	if rerr == nil && first.Op == opHello {
		if busy := s.active; busy != nil || (s.cfg.Once && s.served) {
			why := "it serves one client and is done"
			if busy != nil {
				why = fmt.Sprintf("busy with %s (one client at a time)", busy.who) // who is written under s.mu
			}
			s.mu.Unlock()
			_ = sess.c.send(&ctlMsg{Version: ctlVersion, Error: "server " + why}, refuseTimeout)
			_ = sess.c.Close()
			s.logf("# refused %s: %s", sess.who, why)
			return false, nil
		}
		s.active, s.served, took = sess, true, true
		s.freed = make(chan struct{})
	}
	s.mu.Unlock()
	sess.first, sess.firstErr, sess.preread = first, rerr, true
	err = sess.run(ctx)
	if took {
		s.mu.Lock()
		s.active = nil
		close(s.freed)
		if !sess.greeted {
			// Never a client (a hello of another control version, or
			// without a pid): -once still waits for one.
			s.served = false
		}
		s.mu.Unlock()
	}
	return took, err
}

// Close stops listening, removes the socket files and ends the session
// in progress. Idempotent; every call returns once the sockets are closed.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		active := s.active
		for p := range s.pending {
			p.abort()
		}
		s.mu.Unlock()
		if active != nil {
			active.abort()
		}
		err := errors.Join(s.ctl.Close(), s.ln.Close())
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		s.closeErr = err
	})
	return s.closeErr
}

// session serves one client.
type session struct {
	s        *Server
	c        *ctlConn
	pid      int    // the client's (over tcp: from its hello)
	source   string // see pendingSource
	seq      uint64 // its place in the accept order
	evicted  bool   // closed before its hello to make room (Server.admitPending; under Server.mu)
	who      string // "client pid 123", "client pid 123 at 10.0.0.2:41000"
	ep       *engine.Endpoint
	bufs     map[uint64]*srvBuf
	bytes    int // the size of bufs' buffers, summed
	nextID   uint64
	requests int
	greeted  bool // the server accepted the client's hello: a -once server's one client
	leaving  bool // the client said bye (under Server.mu)
	resp     *responder
	// preread: the first message (or the error reading it) was read
	// before run (Server.serveConn).
	preread  bool
	first    *ctlMsg
	firstErr error
}

type srvBuf struct {
	b    *engine.Buffer
	seed byte
}

func (ss *session) abort() { ss.c.abort() }

func (ss *session) run(ctx context.Context) (err error) {
	stop := context.AfterFunc(ctx, ss.abort)
	defer stop()
	defer func() { err = errors.Join(err, ss.cleanup()) }()
	ss.s.logf("# %s connected", ss.who)
	for {
		// The hello must come first, and soon (Server.serveConn reads it):
		// until then the client is not identified and holds nothing.
		// Later requests (a ping at least) must come within idleWait, or
		// a client that stopped without closing its connection would hold
		// the server for good.
		timeout := ss.s.idleWait
		if ss.requests == 0 {
			timeout = ss.s.helloWait
		}
		var m *ctlMsg
		var err error
		if ss.preread && ss.requests == 0 {
			m, err = ss.first, ss.firstErr
		} else {
			m, err = ss.c.recv(timeout)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return errors.New("disconnected without saying bye")
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && ss.requests > 0 {
				return fmt.Errorf("no request or ping within %v: the client is gone or stopped; the server is free again", timeout)
			}
			return err
		}
		ss.requests++
		if ss.requests == 1 && m.Op != opHello {
			r := refusal("%q before hello: say hello first", m.Op)
			_ = ss.c.send(r, refuseTimeout)
			return errors.New(r.Error)
		}
		r := ss.handle(ctx, m)
		if m.Op == opBye {
			// Before the reply: once the client has it, it may be gone,
			// and the next client's hello must find the slot being freed.
			ss.s.mu.Lock()
			ss.leaving = true
			ss.s.mu.Unlock()
		}
		if err := ss.c.send(r, ctlTimeout); err != nil {
			return err
		}
		if m.Op == opBye {
			return nil
		}
		if m.Op == opHello && r.Error != "" {
			return errors.New(r.Error)
		}
		if m.Op == opHello {
			ss.greeted = true
		}
	}
}

func (ss *session) cleanup() error {
	if h := ss.s.cleanupHook; h != nil {
		h()
	}
	var errs []error
	if ss.resp != nil {
		ss.resp.abort.Store(true)
		<-ss.resp.done
		errs = append(errs, ss.resp.free())
		ss.resp = nil
	}
	for id, b := range ss.bufs {
		errs = append(errs, b.b.Free())
		delete(ss.bufs, id)
	}
	if ss.ep != nil {
		errs = append(errs, ss.ep.Close())
	}
	errs = append(errs, ss.c.Close())
	err := errors.Join(errs...)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func refusal(format string, args ...any) *ctlMsg {
	return &ctlMsg{Error: fmt.Sprintf(format, args...)}
}

func (ss *session) handle(ctx context.Context, m *ctlMsg) *ctlMsg {
	eng := ss.s.eng
	switch m.Op {
	case opHello:
		if m.Version != ctlVersion {
			return refusal("control version %d not supported (want %d)", m.Version, ctlVersion)
		}
		r := &ctlMsg{Version: ctlVersion, PID: os.Getpid(), Device: ss.s.cfg.Device}
		if ss.s.tcp {
			if m.PID <= 0 {
				return refusal("hello without the client's pid")
			}
			if ss.pid == 0 {
				ss.pid = m.PID
				ss.s.mu.Lock()
				ss.who = fmt.Sprintf("client pid %d at %s", m.PID, ss.c.c.RemoteAddr())
				ss.s.mu.Unlock()
				ss.c.to = ss.who
			}
			r.Port = ss.s.enginePort()
			r.Transport = ss.s.Transport()
		}
		env := CurrentEnvironment(&Env{Engine: eng, Transport: ss.s.Transport()})
		r.Env = &env
		return r
	case opAttach:
		if ss.ep != nil {
			return refusal("already attached")
		}
		ep, err := ss.accept(ctx)
		if err != nil {
			return refusal("%v", err)
		}
		ss.ep = ep
		return &ctlMsg{}
	case opBye, opPing:
		return &ctlMsg{}
	case opAlloc:
		if m.Size <= 0 || m.Size > MaxSize {
			return refusal("bad size %d (want 1..%d)", m.Size, MaxSize)
		}
		if len(ss.bufs) >= maxSessionBufs {
			return refusal("too many buffers: %d allocated (max %d); free one first", len(ss.bufs), maxSessionBufs)
		}
		if ss.bytes+m.Size > ss.s.maxBytes {
			return refusal("too many buffers: %s allocated, %s more would exceed %s; free one first",
				FormatSize(ss.bytes), FormatSize(m.Size), FormatSize(ss.s.maxBytes))
		}
		loc := engine.Host
		switch m.Mem {
		case Host:
		case Gaudi:
			if eng.NumDevices() == 0 {
				return refusal("no Gaudi device open")
			}
			loc = engine.Gaudi(ss.s.cfg.Device)
		default:
			return refusal("unknown memory type %q", m.Mem)
		}
		b, err := eng.Alloc(m.Size, loc)
		if err != nil {
			return refusal("allocate %s of %s: %v", FormatSize(m.Size), m.Mem, err)
		}
		if err := fillBuffer(ctx, eng, b, m.Seed, m.Complement); err != nil {
			_ = b.Free()
			return refusal("fill: %v", err)
		}
		k, err := b.Export()
		if err != nil {
			_ = b.Free()
			return refusal("export: %v", err)
		}
		ss.nextID++
		ss.bufs[ss.nextID] = &srvBuf{b: b, seed: m.Seed}
		ss.bytes += m.Size
		return &ctlMsg{Buf: ss.nextID, Key: k.Bytes()}
	case opFree:
		b, ok := ss.bufs[m.Buf]
		if !ok {
			return refusal("no buffer %d", m.Buf)
		}
		if ss.resp != nil && ss.resp.recv == b.b {
			return refusal("buffer %d is in use by the ping-pong", m.Buf)
		}
		delete(ss.bufs, m.Buf)
		ss.bytes -= b.b.Size()
		if err := b.b.Free(); err != nil {
			return refusal("free: %v", err)
		}
		return &ctlMsg{}
	case opVerify:
		b, ok := ss.bufs[m.Buf]
		if !ok {
			return refusal("no buffer %d", m.Buf)
		}
		var skip span
		if m.HasSeq {
			skip = span{m.SeqOff, 8}
		}
		if err := checkBuffer(ctx, eng, b.b, m.Seed, skip, "peer destination"); err != nil {
			return refusal("%v", err)
		}
		return &ctlMsg{}
	case opPingPong:
		return ss.startPingPong(ctx, m)
	case opPingPongEnd:
		return ss.endPingPong(m)
	}
	return refusal("unknown request %q", m.Op)
}

// accept picks up the engine endpoint the client opened: the next one
// from the client's pid (over tcp: from the client's pid at the host its
// control connection comes from).
func (ss *session) accept(ctx context.Context) (*engine.Endpoint, error) {
	actx, cancel := context.WithTimeout(ctx, attachTimeout)
	defer cancel()
	for {
		ep, err := ss.s.ln.Accept(actx)
		if err != nil {
			return nil, fmt.Errorf("no engine endpoint from %s: %v", ss.who, err)
		}
		select {
		case <-ep.Done():
			_ = ep.Close() // a previous client's, already closed
			continue
		default:
		}
		if ss.ours(ep.Peer()) {
			if want := ss.s.Transport(); ss.s.tcp && ep.Transport().String() != want {
				_ = ep.Close()
				return nil, fmt.Errorf("the engine endpoint from %s is %s, this server serves %s", ss.who, ep.Transport(), want)
			}
			return ep, nil
		}
		// Not this session's client: no session will take it.
		ss.s.logf("# %s: closed an engine endpoint from %s", ss.who, ep.Peer())
		_ = ep.Close()
	}
}

// ours reports whether an endpoint's peer ("peer "gxfer" (pid 123)", over
// tcp "peer "gxfer" (pid 123 at 10.0.0.2:41000)") is this session's client.
func (ss *session) ours(peer string) bool {
	if !ss.s.tcp {
		return strings.HasSuffix(peer, fmt.Sprintf("(pid %d)", ss.pid))
	}
	want := fmt.Sprintf("(pid %d at ", ss.pid)
	i := strings.LastIndex(peer, want)
	if i < 0 || !strings.HasSuffix(peer, ")") {
		return false
	}
	host, _, err := net.SplitHostPort(peer[i+len(want) : len(peer)-1])
	if err != nil {
		return false
	}
	ta, ok := ss.c.c.RemoteAddr().(*net.TCPAddr)
	return ok && ta.IP.Equal(net.ParseIP(host))
}

// refuseTimeout bounds the exchange with a client the server refuses.
const refuseTimeout = 2 * time.Second

// A session holds at most maxSessionBufs buffers of maxSessionBytes in
// all: a client needs one or two at a time (see newRMA, newPingPong).
const maxSessionBufs = 64

const maxSessionBytes = 2 * MaxSize
