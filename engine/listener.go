package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/handshake"
	"github.com/gxfer/gxfer/wire"
)

// Listen and Dial hand the sockets and the handshake on each connection
// (authentication, identity checks, the choice of the data path, and at
// a listener the bounds on pending handshakes and on peers) to
// internal/handshake, which calls newEndpoint once it is done.

// ErrTooManyPeers: a listener refused a connection because it serves
// Config.MaxPeers endpoints, or Config.MaxPeersPerSource from the
// dialer's source, that are all busy (each made a request and has had
// traffic within Config.PeerIdleEvict, or has work in flight). The
// dialer's error matches it (and ErrPeer).
var ErrTooManyPeers = gxerr.TooManyPeers

// ErrUnauthenticated: a TCP peer failed (or refused) authentication with
// Config.ClusterSecret (engines with the same secret prove it to each
// other with an HMAC challenge-response, wire.Auth; unix sockets'
// peers are checked by the kernel instead).
var ErrUnauthenticated = gxerr.Unauthenticated

// Listener accepts endpoints from peers, on a unix socket (same node) or
// a TCP port. Accepted endpoints are served whether or not Accept is
// called. A Listener not made by Engine.Listen (a declared Listener{}, or
// a nil *Listener) refuses Accept and Close with ErrInvalid; its Addr and
// Transport are zero.
type Listener struct {
	e  *Engine
	hs *handshake.Listener[*Endpoint]
}

// local is the engine's side of its handshakes.
func (e *Engine) local() *handshake.Local {
	return &handshake.Local{Hello: e.ident.hello, Secret: e.cfg.ClusterSecret, RDMA: e.rdma != nil,
		PeerTimeout: e.cfg.PeerTimeout, TCPReadSpin: e.cfg.TCPReadSpin, Logger: e.log}
}

// Listen accepts peers at addr. network is "unix" (addr is the path of a
// SOCK_SEQPACKET socket created 0600; peers of another uid are refused) or
// "tcp", "tcp4", "tcp6" (addr is host:port; port 0 picks one, see Addr).
func (e *Engine) Listen(network, addr string) (*Listener, error) {
	if e.invalid() {
		return nil, errNoEngineMade
	}
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := handshake.CheckSecret(e.cfg.ClusterSecret); err != nil {
		return nil, err
	}
	kind, err := handshake.Network(network)
	if err != nil {
		return nil, err
	}
	cfg := handshake.ListenConfig[*Endpoint]{Local: e.local(), Network: network, Addr: addr, MaxPeers: e.cfg.MaxPeers,
		MaxPendingPerSource: e.cfg.MaxPendingPerSource, MaxPeersPerSource: e.cfg.MaxPeersPerSource, PeerIdleEvict: e.cfg.PeerIdleEvict, Connect: e.newEndpoint}
	if kind == datapath.KindTCP {
		want, err := e.chooseTransport(nil)
		if err != nil {
			return nil, err
		}
		cfg.OfferRDMA = want != TransportTCP
	}
	hs, err := handshake.Listen(cfg)
	if err != nil {
		return nil, err
	}
	l := &Listener{e: e, hs: hs}
	e.epMu.Lock()
	if e.closed.Load() { // Close began since the check above: it has taken its list of listeners
		e.epMu.Unlock()
		_ = hs.Close()
		return nil, ErrClosed
	}
	e.listeners[l] = struct{}{}
	e.epMu.Unlock()
	return l, nil
}

// Addr is the socket path ("unix") or the host:port bound ("tcp").
func (l *Listener) Addr() string {
	if l.invalid() {
		return ""
	}
	return l.hs.Addr()
}

// Transport is the transport of the endpoints the listener accepts.
func (l *Listener) Transport() TransportKind {
	if l.invalid() {
		return TransportAuto
	}
	return TransportKind(l.hs.Kind())
}

// Accept returns the next endpoint a peer opened. It fails with
// ErrClosed once the listener is closed, and with ErrCanceled or
// ErrTimeout (wrapping ctx's error) when ctx ends first. An endpoint that
// ended before Accept took it (its peer closed it or went, the listener
// closed it to make room) is skipped; one may still end at any time
// after Accept returned it (see Endpoint.Done).
func (l *Listener) Accept(ctx context.Context) (*Endpoint, error) {
	if l.invalid() {
		return nil, errNoListener
	}
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	return l.hs.Accept(ctx)
}

// Close stops accepting; endpoints already open stay open and served,
// whether Accept took them or not (an owner serving without Accept may
// close its listener to turn new peers away). Idempotent.
func (l *Listener) Close() error {
	if l.invalid() {
		return errNoListener
	}
	err := l.hs.Close()
	l.e.epMu.Lock()
	delete(l.e.listeners, l)
	l.e.epMu.Unlock()
	return err
}

// Dial opens an endpoint to the engine listening at addr: network "unix"
// (a socket path on this node) or "tcp", "tcp4", "tcp6" (host:port; the
// transport is Config.Transport unless WithTransport says otherwise).
// ctx bounds the connect and the handshake: if it ends first, Dial fails
// with ErrTimeout (ctx's deadline) or ErrCanceled, wrapping ctx's error.
// Both are bounded by 5 s together too: a connect unanswered by then (a
// TCP host that drops the SYN) fails with ErrTimeout and ErrPeer, rather
// than after the kernel's SYN retries (about 2 minutes on Linux), and so
// does a handshake unanswered by then (a peer that accepted the
// connection and stays silent), on every network; ErrTimeout is the
// error's kind.
// A nil option is skipped.
func (e *Engine) Dial(ctx context.Context, network, addr string, opts ...DialOption) (*Endpoint, error) {
	if e.invalid() {
		return nil, errNoEngineMade
	}
	// The TCP data path opens its lanes as this Dial did (lanes.go).
	return e.dial(withDialInfo(ctx, network, addr, opts), network, addr, opts, nil)
}

// dial opens one connection and performs the handshake; a lane is an
// extra connection of an endpoint whose peer is laneOf (nil: not a lane;
// the peer serves a lane but does not hand it to Accept).
func (e *Engine) dial(ctx context.Context, network, addr string, opts []DialOption, laneOf *wire.EngineID) (*Endpoint, error) {
	lane := laneOf != nil
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := handshake.CheckSecret(e.cfg.ClusterSecret); err != nil {
		return nil, err
	}
	kind, err := handshake.Network(network)
	if err != nil {
		return nil, err
	}
	d := handshake.DialConfig{Local: e.local(), Network: network, Addr: addr, Lane: lane, LaneOf: laneOf}
	if lane {
		ctx = context.WithValue(ctx, laneKey{}, true) // newEndpoint marks the endpoint a lane
	}
	if kind == datapath.KindTCP { // the control channel; the data path may be RDMA
		want, err := e.chooseTransport(opts)
		if err != nil {
			return nil, err
		}
		d.Want = datapath.Kind(want)
	}
	callerCtx := ctx
	ctx, done, err := e.startDial(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	ep, err := handshake.Dial(ctx, d, e.newEndpoint)
	switch {
	case err == nil || errors.Is(err, ErrClosed):
	case e.closed.Load():
		err = newErr(ErrClosed, "dial "+addr, err) // Close ended the handshake
	case ctxEnded(callerCtx) != nil:
		// The caller's ctx ended the connect or the handshake: ErrTimeout
		// or ErrCanceled, as every call bounded by a ctx reports it, not
		// the peer's failure.
		err = ctxErr(fmt.Sprintf("dial %s (%v)", addr, err), ctxEnded(callerCtx))
	}
	return ep, err
}

// ctxEnded is why ctx has ended, nil if it has not; at its deadline that
// is DeadlineExceeded also before ctx's own timer has fired (a socket
// deadline set from it fires first).
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// startDial counts a Dial in flight unless the engine is closed: its
// handshake then runs under a ctx that Close cancels (Close waits for the
// Dials it counted before it closes the endpoints and the transports).
// done ends the count.
func (e *Engine) startDial(ctx context.Context) (_ context.Context, done func(), _ error) {
	e.epMu.Lock()
	if e.closed.Load() {
		e.epMu.Unlock()
		return nil, nil, ErrClosed
	}
	e.dials.Add(1)
	e.epMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.closing, cancel)
	return ctx, func() {
		stop()
		cancel()
		e.dials.Done()
	}, nil
}
