package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/gxfer/gxfer/engine"
)

// ServerConfig configures a perf server.
type ServerConfig struct {
	// Path is the engine socket; the control socket is Path + CtlSuffix.
	Path string
	// Device is the Gaudi that holds the server's Gaudi buffers.
	Device int
	// Once: serve one client, then Serve returns.
	Once bool
	// Log receives one line per event (client connected, done, refused);
	// nil: silent.
	Log io.Writer
}

// Server is the peer of the ipc tests, like ucx_perftest without a host
// argument: it listens, and for each client (one at a time) allocates,
// fills, exports and verifies buffers on request, and answers ping-pongs.
type Server struct {
	eng *engine.Engine
	cfg ServerConfig
	ln  *engine.Listener
	ctl *net.UnixListener

	mu     sync.Mutex
	active *session // the client being served
	served bool
	closed bool
	wg     sync.WaitGroup
	logMu  sync.Mutex

	closeOnce sync.Once
	closeErr  error
}

// Listen starts a perf server on eng: it creates the engine socket and the
// control socket. A stale socket file (nothing listening) is replaced; a
// live one is an error.
func Listen(eng *engine.Engine, cfg ServerConfig) (_ *Server, err error) {
	if err := checkSocketPath(cfg.Path); err != nil {
		return nil, fmt.Errorf("perf server: %w", err)
	}
	if n := eng.NumDevices(); n > 0 && (cfg.Device < 0 || cfg.Device >= n) {
		return nil, fmt.Errorf("perf server: device %d does not exist (%d open)", cfg.Device, n)
	}
	for _, p := range []string{cfg.Path, cfg.Path + CtlSuffix} {
		if err := removeStale(p); err != nil {
			return nil, err
		}
	}
	s := &Server{eng: eng, cfg: cfg}
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

// Addr is the address clients give to -x: "unix:PATH".
func (s *Server) Addr() string { return "unix:" + s.cfg.Path }

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
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer stop()
	defer s.Close()
	var once struct {
		sync.Mutex
		err error
	}
	for {
		c, err := s.ctl.AcceptUnix()
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
		cred, err := peerUcred(c)
		if err == nil && int(cred.Uid) != os.Getuid() {
			err = fmt.Errorf("uid %d is not ours", cred.Uid)
		}
		if err != nil {
			s.logf("# refused a control connection: %v", err)
			_ = c.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			break
		}
		if busy := s.active; busy != nil || (s.cfg.Once && s.served) {
			s.mu.Unlock()
			why := "it serves one client and is done"
			if busy != nil {
				why = fmt.Sprintf("busy with client pid %d (one client at a time)", busy.pid)
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.refuse(c, int(cred.Pid), why) }()
			continue
		}
		sess := &session{s: s, c: newCtlConn(c, fmt.Sprintf("client pid %d", cred.Pid)), pid: int(cred.Pid), bufs: map[uint64]*srvBuf{}}
		s.active, s.served = sess, true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			err := sess.run(ctx)
			s.mu.Lock()
			s.active = nil
			s.mu.Unlock()
			if err != nil {
				s.logf("# client pid %d: %v", sess.pid, err)
			} else {
				s.logf("# client pid %d done (%d requests)", sess.pid, sess.requests)
			}
			if s.cfg.Once {
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

// refuse answers a client's hello with why the server cannot serve it.
func (s *Server) refuse(c *net.UnixConn, pid int, why string) {
	cc := newCtlConn(c, fmt.Sprintf("client pid %d", pid))
	defer cc.Close()
	if _, err := cc.recv(refuseTimeout); err != nil {
		return
	}
	_ = cc.send(&ctlMsg{Version: ctlVersion, Error: "server " + why}, refuseTimeout)
	s.logf("# refused client pid %d: %s", pid, why)
}

// Close stops listening, removes the socket files and ends the session
// in progress. Idempotent; every call returns once the sockets are closed.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		active := s.active
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
	pid      int
	ep       *engine.Endpoint
	bufs     map[uint64]*srvBuf
	nextID   uint64
	requests int
	resp     *responder
}

type srvBuf struct {
	b    *engine.Buffer
	seed byte
}

func (ss *session) abort() { _ = ss.c.c.SetDeadline(time.Unix(1, 0)) }

func (ss *session) run(ctx context.Context) (err error) {
	stop := context.AfterFunc(ctx, ss.abort)
	defer stop()
	defer func() { err = errors.Join(err, ss.cleanup()) }()
	ss.s.logf("# client pid %d connected", ss.pid)
	for {
		m, err := ss.c.recv(0)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return errors.New("disconnected without saying bye")
			}
			return err
		}
		ss.requests++
		r := ss.handle(ctx, m)
		if err := ss.c.send(r, ctlTimeout); err != nil {
			return err
		}
		if m.Op == opBye {
			return nil
		}
		if m.Op == opHello && r.Error != "" {
			return errors.New(r.Error)
		}
	}
}

func (ss *session) cleanup() error {
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
		env := CurrentEnvironment(&Env{Engine: eng})
		return &ctlMsg{Version: ctlVersion, PID: os.Getpid(), Env: &env, Device: ss.s.cfg.Device}
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
	case opBye:
		return &ctlMsg{}
	case opAlloc:
		if m.Size <= 0 || m.Size > MaxSize {
			return refusal("bad size %d (want 1..%d)", m.Size, MaxSize)
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
// from the client's pid.
func (ss *session) accept(ctx context.Context) (*engine.Endpoint, error) {
	actx, cancel := context.WithTimeout(ctx, attachTimeout)
	defer cancel()
	want := fmt.Sprintf("(pid %d)", ss.pid)
	for {
		ep, err := ss.s.ln.Accept(actx)
		if err != nil {
			return nil, fmt.Errorf("no engine endpoint from pid %d: %v", ss.pid, err)
		}
		select {
		case <-ep.Done():
			continue // a previous client's, already closed
		default:
		}
		if strings.HasSuffix(ep.Peer(), want) {
			return ep, nil
		}
	}
}

// responder answers ping-pong rounds: it spins on its receive buffer's
// sequence and Puts its send buffer back.
type responder struct {
	ss     *session
	recv   *engine.Buffer
	send   *engine.Buffer
	key    engine.RemoteKey
	bind   *engine.Binding // host to host: checked and imported once
	seqOff int
	seed   byte   // of the bytes the client sends
	rounds uint64 // rounds answered; read once done is closed
	err    error
	abort  atomic.Bool
	done   chan struct{}
}

func (r *responder) free() error {
	var err error
	if r.bind != nil {
		err = r.bind.Close()
		r.bind = nil
	}
	if r.send == nil {
		return err
	}
	err = errors.Join(err, r.send.Free())
	r.send = nil
	return err
}

func (ss *session) startPingPong(ctx context.Context, m *ctlMsg) *ctlMsg {
	eng := ss.s.eng
	if ss.ep == nil {
		return refusal("not attached")
	}
	if ss.resp != nil {
		return refusal("a ping-pong is already running")
	}
	b, ok := ss.bufs[m.Buf]
	if !ok || b.b.Location().IsGaudi() {
		return refusal("no host buffer %d", m.Buf)
	}
	if m.Size != b.b.Size() || m.Size < 8 || m.SeqOff < 0 || m.SeqOff > m.Size-8 || m.SeqOff%8 != 0 {
		return refusal("bad ping-pong geometry: size %d, sequence at %d", m.Size, m.SeqOff)
	}
	key, err := engine.ParseRemoteKey(m.Key)
	if err != nil {
		return refusal("client key: %v", err)
	}
	if key.Len() != m.Size || key.Location().IsGaudi() {
		return refusal("client key is for %d bytes of %s, want %d bytes of host memory", key.Len(), key.Location(), m.Size)
	}
	send, err := eng.Alloc(m.Size, engine.Host)
	if err != nil {
		return refusal("allocate send buffer: %v", err)
	}
	r := &responder{ss: ss, recv: b.b, send: send, key: key, seqOff: m.SeqOff, seed: b.seed, done: make(chan struct{})}
	fillPattern(send.Bytes(), m.Seed, false)
	atomic.StoreUint64(r.seqPtr(send), 0)
	// Map the client's buffer now, not in the first round: a Get of a few
	// bytes into a scratch buffer leaves the client's memory alone.
	scratch, err := eng.Alloc(8, engine.Host)
	if err == nil {
		err = ss.ep.GetSync(ctx, scratch.All(), key.Slice(0, 8))
		err = errors.Join(err, scratch.Free())
	}
	if err == nil {
		r.bind, err = bind(ctx, ss.ep, send.All(), key)
	}
	if err != nil {
		_ = r.free()
		return refusal("map the client's buffer: %v", err)
	}
	ss.resp = r
	go r.run()
	return &ctlMsg{}
}

func (r *responder) seqPtr(b *engine.Buffer) *uint64 {
	return (*uint64)(unsafe.Pointer(&b.Bytes()[r.seqOff]))
}

// refuseTimeout bounds the exchange with a client the server refuses.
const refuseTimeout = 2 * time.Second

// idleTimeout ends a responder whose client stopped sending.
var idleTimeout = 30 * time.Second

func (r *responder) run() {
	defer close(r.done)
	ep := r.ss.ep
	recvSeq, sendSeq := r.seqPtr(r.recv), r.seqPtr(r.send)
	sendS := r.send.All()
	ctx := context.Background()
	next := uint64(1)
	var lastCheck time.Time
	var lastRounds uint64
	idle := 0
	for {
		v := atomic.LoadUint64(recvSeq)
		if v == next {
			*sendSeq = next // this goroutine's buffer: a plain store (see pingPong.RoundTrip)
			// Inline Puts are done on return; a larger one is waited for
			// at once (see pingPong.RoundTrip).
			if r.bind != nil {
				r.err = r.bind.Put()
			} else {
				r.err = waitFuture(ctx, ep.Put(ctx, sendS, r.key))
			}
			if r.err != nil {
				return
			}
			r.rounds = next // read after done is closed
			next++
			idle = 0
			continue
		}
		if v == stopSeq {
			return
		}
		if idle++; idle&0xfff != 0 {
			continue
		}
		if r.abort.Load() {
			r.err = errors.New("aborted")
			return
		}
		now := time.Now()
		if next != lastRounds || lastCheck.IsZero() {
			lastRounds, lastCheck = next, now
		} else if now.Sub(lastCheck) > idleTimeout {
			r.err = fmt.Errorf("no ping-pong round from the client for %v (waiting for round %d)", idleTimeout, next)
			return
		}
		if idle >= 1<<16 {
			runtime.Gosched() // let the engine's goroutines run when this process has one P
		}
		select {
		case <-ep.Done():
			r.err = fmt.Errorf("endpoint: %w", ep.Err())
			return
		default:
		}
	}
}

func (ss *session) endPingPong(m *ctlMsg) *ctlMsg {
	r := ss.resp
	if r == nil {
		return refusal("no ping-pong running")
	}
	select {
	case <-r.done:
	case <-time.After(pingTimeout):
		r.abort.Store(true)
		<-r.done
	}
	ss.resp = nil
	ferr := r.free()
	if r.err != nil {
		return refusal("ping-pong: %v", r.err)
	}
	if ferr != nil {
		return refusal("free the send buffer: %v", ferr)
	}
	rounds := r.rounds
	if rounds != m.Seq {
		return refusal("answered %d rounds, the client sent %d", rounds, m.Seq)
	}
	if err := checkPattern(r.recv.Bytes(), r.seed, span{r.seqOff, 8}, "peer receive buffer"); err != nil {
		return refusal("%v", err)
	}
	return &ctlMsg{Rounds: rounds}
}
