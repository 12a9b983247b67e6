package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// Listener accepts endpoints from peers, on a unix socket (same node) or
// a TCP port. Accepted endpoints are served whether or not Accept is
// called.
type Listener struct {
	e        *Engine
	kind     TransportKind
	addr     string
	accept   func() (wire.Transport, *ipc.Cred, string, error)
	closeL   func() error
	accepted chan *Endpoint
	done     chan struct{}
	once     sync.Once
	ctx      context.Context // canceled by Close: ends handshakes in progress
	cancel   context.CancelFunc
	// Handshakes in progress, oldest first: when all maxHandshakes slots
	// are taken, a new connection evicts the oldest (a silent client
	// cannot hold a slot against newer ones). Accepted endpoints, oldest
	// first, bounded by Config.MaxPeers (see admit).
	mu      sync.Mutex
	pending []*pendingHS
	peers   []*Endpoint
	// offerRDMA: TCP peers that offer RDMA get RDMA endpoints.
	offerRDMA bool
}

// Listen accepts peers at addr. network is "unix" (addr is the path of a
// SOCK_SEQPACKET socket created 0600; peers of another uid are refused) or
// "tcp", "tcp4", "tcp6" (addr is host:port; port 0 picks one, see Addr).
func (e *Engine) Listen(network, addr string) (*Listener, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := e.checkSecret(); err != nil {
		return nil, err
	}
	l := &Listener{e: e, accepted: make(chan *Endpoint, 64), done: make(chan struct{})}
	switch network {
	case "unix":
		il, err := ipc.Listen(addr, ipc.Config{Logger: e.log})
		if err != nil {
			return nil, fmt.Errorf("gxfer: listen %s: %w", addr, err)
		}
		l.kind, l.addr, l.closeL = TransportIPC, il.Path(), il.Close
		l.accept = func() (wire.Transport, *ipc.Cred, string, error) {
			c, err := il.Accept(context.Background())
			if err != nil {
				return nil, nil, "", err
			}
			cred := c.Peer()
			return c, &cred, "", nil
		}
	case "tcp", "tcp4", "tcp6":
		want, err := e.chooseTransport(nil)
		if err != nil {
			return nil, err
		}
		l.offerRDMA = want != TransportTCP
		nl, err := net.Listen(network, addr)
		if err != nil {
			return nil, fmt.Errorf("gxfer: listen %s: %w", addr, err)
		}
		l.kind, l.addr, l.closeL = TransportTCP, nl.Addr().String(), nl.Close
		l.accept = func() (wire.Transport, *ipc.Cred, string, error) {
			c, err := nl.Accept()
			if err != nil {
				return nil, nil, "", err
			}
			return tcp.Frame(c, e.cfg.TCPReadSpin), nil, c.RemoteAddr().String(), nil
		}
	default:
		return nil, newErr(ErrNotSupported, "network "+network+" (\"unix\" or \"tcp\")", nil)
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	e.epMu.Lock()
	e.listeners[l] = struct{}{}
	e.epMu.Unlock()
	go l.loop()
	return l, nil
}

// Addr is the socket path ("unix") or the host:port bound ("tcp").
func (l *Listener) Addr() string { return l.addr }

// Transport is the transport of the endpoints the listener accepts.
func (l *Listener) Transport() TransportKind { return l.kind }

func (l *Listener) loop() {
	defer close(l.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		t, cred, raddr, err := l.accept()
		if err != nil {
			if errors.Is(err, ipc.ErrPeerRefused) {
				l.e.log.Warn().Err(err).Msg("peer refused")
				continue
			}
			if l.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, ipc.ErrClosed) {
				// Out of fds, a connection reset before accept...:
				// keep serving.
				l.e.log.Warn().Err(err).Msg("accept failed")
				select {
				case <-time.After(10 * time.Millisecond):
					continue
				case <-l.ctx.Done():
				}
			}
			return // closed
		}
		p := l.startHandshake(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.endHandshake(p)
			ep, err := l.e.handshakeServer(l.ctx, l, p, l.kind, l.offerRDMA, t, cred, raddr)
			if err != nil {
				l.e.log.Warn().Err(err).Msg("handshake failed")
				return
			}
			if ep.peer.Caps&wire.CapLane != 0 {
				return // a lane of an endpoint already accepted: served only
			}
			select {
			case l.accepted <- ep:
			default: // nobody is accepting: the endpoint is served anyway
			}
		}()
	}
}

// Accept returns the next endpoint a peer opened.
func (l *Listener) Accept(ctx context.Context) (*Endpoint, error) {
	select {
	case ep := <-l.accepted:
		return ep, nil
	case <-l.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops accepting; endpoints already open stay open. Idempotent.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.closeL()
		<-l.done
		l.e.epMu.Lock()
		delete(l.e.listeners, l)
		l.e.epMu.Unlock()
	})
	return err
}

// Dial opens an endpoint to the engine listening at addr: network "unix"
// (a socket path on this node) or "tcp", "tcp4", "tcp6" (host:port; the
// transport is Config.Transport unless WithTransport says otherwise).
func (e *Engine) Dial(ctx context.Context, network, addr string, opts ...DialOption) (*Endpoint, error) {
	// The TCP data path opens its lanes as this Dial did (lanes.go).
	return e.dial(withDialInfo(ctx, network, addr, opts), network, addr, opts, false)
}

// dial opens one connection and performs the handshake; a lane is an
// extra connection of an endpoint (its peer serves it but does not hand
// it to Accept).
func (e *Engine) dial(ctx context.Context, network, addr string, opts []DialOption, lane bool) (*Endpoint, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := e.checkSecret(); err != nil {
		return nil, err
	}
	var (
		t    wire.Transport
		kind TransportKind
		want TransportKind // tcp: TransportAuto, TCP or RDMA
		cred *ipc.Cred
	)
	switch network {
	case "unix":
		c, err := ipc.Dial(ctx, addr, ipc.Config{Logger: e.log})
		if err != nil {
			return nil, newErr(ErrPeer, "dial "+addr, err)
		}
		pc := c.Peer()
		t, kind, cred = c, TransportIPC, &pc
	case "tcp", "tcp4", "tcp6":
		var err error
		if want, err = e.chooseTransport(opts); err != nil {
			return nil, err
		}
		kind = TransportTCP // the control channel; the data path may be RDMA
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, newErr(ErrPeer, "dial "+addr, err)
		}
		t = tcp.Frame(c, e.cfg.TCPReadSpin)
	default:
		return nil, newErr(ErrNotSupported, "network "+network+" (\"unix\" or \"tcp\")", nil)
	}
	wc := wire.NewConn(t, e.connConfig(kind))
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	local := e.helloFor(kind, kind == TransportTCP && want != TransportTCP && !lane)
	if lane {
		local.Caps |= wire.CapLane
	}
	fail := func(err error) (*Endpoint, error) {
		_ = wc.Close()
		return nil, newErr(ErrPeer, "handshake with "+addr, err)
	}
	if err := wc.Send(&local); err != nil {
		return fail(err)
	}
	if local.Caps&wire.CapAuth != 0 {
		if err := e.authDialer(hctx, wc, local); err != nil {
			if errors.Is(err, ErrUnauthenticated) {
				_ = wc.Close()
				return nil, fmt.Errorf("gxfer: handshake with %s: %w", addr, err)
			}
			return fail(err)
		}
	}
	f, err := wc.Recv(hctx)
	if err != nil {
		return fail(err)
	}
	var ack wire.HelloAck
	if err := decodeOrPeerError(&f, &ack); err != nil {
		if we, ok := err.(*wire.Error); ok && we.Code == wire.StatusNoResources {
			_ = wc.Close()
			return nil, newErr(ErrTooManyPeers, "handshake with "+addr, newErr(ErrPeer, "", we))
		}
		if we, ok := err.(*wire.Error); ok && we.Code == wire.StatusRefused && kind == TransportTCP {
			_ = wc.Close()
			return nil, newErr(ErrUnauthenticated, "handshake with "+addr, we)
		}
		return fail(err)
	}
	if err := wire.CheckAck(local, ack); err != nil {
		return fail(err)
	}
	if cred != nil {
		if err := checkIdentity(ack.Hello, *cred); err != nil {
			return fail(err)
		}
	}
	if want == TransportRDMA && ack.Accepted&wire.CapRDMA == 0 {
		_ = wc.Close()
		return nil, newErr(ErrNotSupported, fmt.Sprintf("transport rdma: peer %q (pid %d at %s) does not offer RDMA (no usable RDMA device there, or RDMA disabled)",
			ack.Name, ack.PID, addr), nil)
	}
	want = kind
	if kind == TransportTCP && ack.Accepted&wire.CapRDMA != 0 {
		want = TransportRDMA
	}
	ep, err := e.newEndpoint(hctx, wc, ack.Hello, kind, want, addr, true)
	if err != nil && want == TransportRDMA && !errors.Is(err, ErrClosed) {
		return nil, newErr(ErrPeer, "handshake with "+addr, err) // the queue pairs' setup
	}
	return ep, err
}

// helloFor is this engine's Hello on a transport: fd passing and shared
// host memory on a unix socket, data frames over TCP (and RDMA when
// offered); heartbeats on both.
func (e *Engine) helloFor(kind TransportKind, offerRDMA bool) wire.Hello {
	h := e.ident.hello
	h.Caps |= wire.CapHeartbeat
	if kind == TransportTCP {
		h.Caps = tcp.Caps | wire.CapHeartbeat
		if offerRDMA && e.rdma != nil {
			h.Caps |= wire.CapRDMA
		}
		if len(e.cfg.ClusterSecret) > 0 {
			h.Caps |= wire.CapAuth
		}
	}
	return h
}

// connConfig is the framing of a transport: a peer silent for PeerTimeout
// (not even a heartbeat) ends the endpoint.
func (e *Engine) connConfig(kind TransportKind) wire.ConnConfig {
	cfg := wire.ConnConfig{MaxFrame: ipcMaxFrame, WriteTimeout: sendTimeout}
	if kind == TransportTCP {
		cfg.MaxFrame = tcp.MaxFrame
		// A send blocked this long means the peer stopped reading.
		cfg.WriteTimeout = max(sendTimeout, e.cfg.PeerTimeout)
	}
	if e.cfg.PeerTimeout > 0 {
		cfg.ReadTimeout = e.cfg.PeerTimeout
	}
	return cfg
}

// checkIdentity refuses a peer whose Hello claims another process than the
// kernel reports for the socket (SO_PEERCRED): peers are keyed by pid in
// the IPC handle cache, so a false claim would let one peer stand in for
// another.
func checkIdentity(h wire.Hello, cred ipc.Cred) error {
	if cred.PID == 0 {
		return errors.New("peer's pid is not visible in our pid namespace")
	}
	if h.PID != cred.PID || h.UID != cred.UID {
		return fmt.Errorf("peer claims pid %d uid %d but the socket says pid %d uid %d", h.PID, h.UID, cred.PID, cred.UID)
	}
	return nil
}

func (e *Engine) handshakeServer(parent context.Context, l *Listener, p *pendingHS, kind TransportKind, offerRDMA bool, t wire.Transport, cred *ipc.Cred, raddr string) (*Endpoint, error) {
	wc := wire.NewConn(t, e.connConfig(kind))
	ctx, cancel := context.WithTimeout(parent, serverHandshakeTimeout)
	defer cancel()
	f, err := wc.Recv(ctx)
	if err != nil {
		_ = wc.Close()
		return nil, err
	}
	var hello wire.Hello
	if err := f.Decode(&hello); err != nil {
		_ = f.CloseFDs()
		_ = wc.Close()
		return nil, err
	}
	if cred != nil {
		if err := checkIdentity(hello, *cred); err != nil {
			_ = wc.Send(wire.NewError(0, wire.StatusRefused, err.Error()))
			_ = wc.Close()
			return nil, err
		}
	}
	if kind == TransportTCP {
		if err := e.authListener(ctx, wc, hello); err != nil {
			_ = wc.Close()
			return nil, err
		}
	}
	ack, err := wire.Negotiate(e.helloFor(kind, offerRDMA && hello.Caps&wire.CapLane == 0), hello)
	if err != nil {
		_ = wc.Send(wire.NewError(0, wire.StatusVersion, err.Error()))
		_ = wc.Close()
		return nil, err
	}
	// Past this point the connection is not evicted as a pending
	// handshake; it counts toward Config.MaxPeers instead.
	if err := l.admit(p); err != nil {
		_ = wc.Send(wire.NewError(0, wire.StatusNoResources, err.Error()))
		_ = wc.Close()
		return nil, err
	}
	if err := wc.Send(&ack); err != nil {
		_ = wc.Close()
		return nil, err
	}
	want := kind
	if ack.Accepted&wire.CapRDMA != 0 {
		want = TransportRDMA
	}
	ep, err := e.newEndpoint(ctx, wc, hello, kind, want, raddr, false)
	if err == nil {
		l.addPeer(ep)
	}
	return ep, err
}

// ErrTooManyPeers: a listener refused a connection because it serves
// Config.MaxPeers endpoints that are all busy. The dialer's error matches
// it (and ErrPeer).
var ErrTooManyPeers = gxerr.TooManyPeers

// serverHandshakeTimeout bounds a connection's handshake at the listener.
const serverHandshakeTimeout = 2 * time.Second

// pendingHS is a connection whose handshake is in progress.
type pendingHS struct {
	t       wire.Transport
	evicted bool // closed to make room (under Listener.mu)
	done    bool // admitted or ended (under Listener.mu)
}

// startHandshake records a connection's handshake; when every slot is
// taken it evicts the oldest pending one (closing its connection). It
// never blocks the accept loop.
func (l *Listener) startHandshake(t wire.Transport) *pendingHS {
	p := &pendingHS{t: t}
	l.mu.Lock()
	var victim *pendingHS
	if len(l.pending) >= maxHandshakes {
		victim = l.pending[0]
		victim.evicted = true
		l.pending = l.pending[1:]
	}
	l.pending = append(l.pending, p)
	l.mu.Unlock()
	if victim != nil {
		_ = victim.t.Close() // its handshake fails at its next read
	}
	return p
}

// endHandshake forgets p (its handshake ended, well or not).
func (l *Listener) endHandshake(p *pendingHS) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropPendingLocked(p)
}

func (l *Listener) dropPendingLocked(p *pendingHS) {
	p.done = true
	for i, q := range l.pending {
		if q == p {
			l.pending = append(l.pending[:i], l.pending[i+1:]...)
			return
		}
	}
}

// admit takes p out of the pending handshakes (it can no longer be
// evicted as one) and makes room for one more peer: at Config.MaxPeers
// endpoints, the oldest that never made a request is closed; if every
// peer is busy, p is refused with ErrTooManyPeers.
func (l *Listener) admit(p *pendingHS) error {
	l.mu.Lock()
	if p.evicted {
		l.mu.Unlock()
		return errors.New("handshake evicted by newer connections")
	}
	l.dropPendingLocked(p)
	live := l.peers[:0]
	for _, ep := range l.peers {
		if ep.Err() == nil {
			live = append(live, ep)
		}
	}
	clear(l.peers[len(live):])
	l.peers = live
	var victim *Endpoint
	if len(l.peers) >= l.e.cfg.MaxPeers {
		for i, ep := range l.peers {
			if !ep.active.Load() {
				victim = ep
				l.peers = append(l.peers[:i], l.peers[i+1:]...)
				break
			}
		}
		if victim == nil {
			l.mu.Unlock()
			return fmt.Errorf("%w: %d endpoints, all in use (Config.MaxPeers)", ErrTooManyPeers, l.e.cfg.MaxPeers)
		}
	}
	l.mu.Unlock()
	if victim != nil {
		l.e.log.Warn().Str("peer", victim.name).Msg("idle peer closed to make room (Config.MaxPeers)")
		victim.fail(victim.peerErr("closed to make room for another peer (it made no request; Config.MaxPeers)", nil))
	}
	return nil
}

// addPeer counts an accepted endpoint toward Config.MaxPeers.
func (l *Listener) addPeer(ep *Endpoint) {
	l.mu.Lock()
	l.peers = append(l.peers, ep)
	l.mu.Unlock()
}
