// Package handshake opens gxfer's endpoints: the exchange on a new
// connection that makes it an endpoint's control channel.
//
// The dialer sends its Hello; over TCP, engines with a cluster secret
// then prove it to each other (auth.go); the listener checks the Hello
// (on a unix socket, against the kernel's credentials of the socket),
// negotiates the version and capabilities (wire.Negotiate), admits the
// peer (Listener: pending handshakes are bounded, per source too, one
// evicted beyond; accepted peers are bounded by MaxPeers, those that
// never made a request closed first, then those idle for longer than
// PeerIdleEvict) and answers with its HelloAck. Both sides then choose
// the endpoint's data path (TCP or RDMA over a TCP control connection,
// shared memory over a unix socket) and hand the connection to a Connect
// function, the engine's, which makes the endpoint.
package handshake

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

const (
	// IPCMaxFrame is the largest frame on a unix socket: below the
	// default SOCK_SEQPACKET send buffer.
	IPCMaxFrame = 192 << 10
	// MaxPending bounds the handshakes in progress per listener (beyond,
	// one is evicted: see Listener.startHandshake).
	MaxPending = 64
	// MaxLanes bounds the connections of one TCP endpoint (the engine's
	// Config.TCPLanes): its own and MaxLanes-1 lanes (wire.CapLane).
	MaxLanes      = 64
	dialTimeout   = 5 * time.Second // a Dial's handshake
	listenTimeout = 2 * time.Second // a connection's handshake at the listener
	sendTimeout   = 5 * time.Second
)

// DefaultMaxPendingPerSource bounds the handshakes in progress from one
// source (ListenConfig.MaxPendingPerSource): a quarter of the slots, far
// more than an engine has at once (it dials its lanes one after another).
const DefaultMaxPendingPerSource = MaxPending / 4

// DefaultMaxPeersPerSource bounds the endpoints (lanes included) a
// listener of maxPeers admits from one source
// (ListenConfig.MaxPeersPerSource): a quarter of them, so that no host
// takes more and at least three others share the rest, but at least
// MaxLanes (one endpoint of the most lanes; a host's worker processes
// each dial theirs: 8 with 4 connections each, say) and at most
// maxPeers.
func DefaultMaxPeersPerSource(maxPeers int) int {
	return min(max(maxPeers/4, MaxLanes), maxPeers)
}

// Local is this engine's side of its handshakes.
type Local struct {
	// Hello is the engine's identity; its Caps are what it offers on a
	// unix socket.
	Hello       wire.Hello
	Secret      []byte // Config.ClusterSecret (TCP authentication)
	RDMA        bool   // the engine has an RDMA transport to offer
	PeerTimeout time.Duration
	TCPReadSpin time.Duration
	Logger      zerolog.Logger
}

// HelloFor is the engine's Hello on a connection of kind: fd passing and
// shared host memory (and message rings) on a unix socket, data frames
// over TCP (and RDMA when offered); heartbeats (reporting use, see
// wire.CapUseReport), application messages and Byes with a reason
// (wire.CapByeReason) on both.
func (l *Local) HelloFor(kind datapath.Kind, offerRDMA bool) wire.Hello {
	h := l.Hello
	h.Caps |= wire.CapHeartbeat | wire.CapUseReport | wire.CapMessages | wire.CapByeReason
	if h.Caps&wire.CapFDPassing != 0 {
		h.Caps |= wire.CapMsgRing
	}
	if kind == datapath.KindTCP {
		h.Caps = tcp.Caps | wire.CapHeartbeat | wire.CapUseReport | wire.CapMessages | wire.CapByeReason
		if offerRDMA && l.RDMA {
			h.Caps |= wire.CapRDMA
		}
		if len(l.Secret) > 0 {
			h.Caps |= wire.CapAuth
		}
	}
	return h
}

// ConnConfig is the framing of a connection of kind: a peer silent for
// PeerTimeout (not even a heartbeat) ends the endpoint.
func (l *Local) ConnConfig(kind datapath.Kind) wire.ConnConfig {
	cfg := wire.ConnConfig{MaxFrame: IPCMaxFrame, WriteTimeout: sendTimeout}
	if kind == datapath.KindTCP {
		cfg.MaxFrame = tcp.MaxFrame
		// A send blocked this long means the peer stopped reading.
		cfg.WriteTimeout = max(sendTimeout, l.PeerTimeout)
	}
	if l.PeerTimeout > 0 {
		cfg.ReadTimeout = l.PeerTimeout
	}
	return cfg
}

// pathFor is the data path of an endpoint whose connection is of kind,
// given the capabilities both sides accepted: RDMA over a TCP control
// connection when both offer it, else the connection's own (TCP, or
// shared memory on a unix socket). Both sides choose alike.
func pathFor(kind datapath.Kind, accepted wire.Caps) datapath.Kind {
	if kind == datapath.KindTCP && accepted&wire.CapRDMA != 0 {
		return datapath.KindRDMA
	}
	return kind
}

// CheckSecret refuses a cluster secret too short to be one.
func CheckSecret(secret []byte) error {
	if n := len(secret); n > 0 && n < wire.MinSecretLen {
		return gxerr.New(gxerr.Invalid, fmt.Sprintf("Config.ClusterSecret of %d bytes (at least %d)", n, wire.MinSecretLen), nil)
	}
	return nil
}

// Peer is an endpoint as a listener sees it (its control channel).
type Peer interface {
	Name() string
	Err() error
	// TakeActivity reports whether the endpoint had traffic (the peer's
	// requests, Data frames, messages; this side's operations on it)
	// since the last call, the first since the endpoint was made, and
	// clears the mark: the listener keeps the time of the last it saw.
	TakeActivity() bool
	// InFlight reports whether the endpoint has work in progress (a
	// request of the peer's being served, a copy into local memory, a
	// request of this side's awaiting its reply): the listener never
	// closes it to make room then.
	InFlight() bool
	Fail(err error)
	// Evict ends the endpoint, closed to make room for another peer
	// (what says so, and why): its error is the peer error what, and
	// the peer is told (see ctrlchan's Evict).
	Evict(what string)
	PeerErr(what string, cause error) error
}

// Connect makes the endpoint P of a connection whose handshake is done;
// its data path is of kind path. ctx bounds the path's setup; addr names
// a TCP peer ("" on a unix socket). A listener's Connect calls Made with
// ctx once the endpoint exists, before it serves the peer's requests.
type Connect[P any] func(ctx context.Context, wc *wire.Conn, peer wire.Hello, path datapath.Kind, addr string, dialer bool) (P, Peer, error)

// madeKey is the context key of a listener's record of a Connect's
// endpoint (see Made).
type madeKey struct{}

// Made tells the listener whose Connect ctx is that p, the endpoint being
// made, exists: from then on it counts as an endpoint, so that one that
// serves requests is never taken for one still connecting (no request
// made, so closed first to make room: see Listener's admission). Call it
// before p can serve a request. An error: the listener closed the
// connection's slot to make room meanwhile, p must not serve (close it;
// the error says why, for the peer). Nil for a dialer's ctx.
func Made(ctx context.Context, p Peer) error {
	if f, ok := ctx.Value(madeKey{}).(func(Peer) error); ok {
		return f(p)
	}
	return nil
}

// DialConfig is a Dial's.
type DialConfig struct {
	Local   *Local
	Network string // see Network
	Addr    string
	// Want is the data path a TCP Dial asks for: KindTCP, KindRDMA (the
	// peer must offer it) or KindAuto (RDMA if both sides offer it).
	Want datapath.Kind
	Lane bool // an extra connection of an endpoint (wire.CapLane)
	// LaneOf is the engine a lane's endpoint reaches: a listener of
	// another engine at Addr is refused (gxerr.Peer). Nil: not checked.
	LaneOf *wire.EngineID
	// Timeout bounds the connect and the handshake together (and the
	// data path's setup); 0: 5 s.
	Timeout time.Duration
}

// Dial connects to a listener, performs the dialer's side of the
// handshake and makes the endpoint. The connect and the handshake end
// at ctx's deadline or after d.Timeout, whichever comes first: a
// connect still unanswered then (a TCP host that drops the SYN) fails
// with gxerr.Timeout wrapping the dial's gxerr.Peer error, instead of
// waiting for the kernel's SYN retries (about 2 minutes on Linux); so
// does a handshake the peer has not answered by then (on every network),
// its error wrapping context.DeadlineExceeded too.
func Dial[P any](ctx context.Context, d DialConfig, connect Connect[P]) (P, error) {
	var zero P
	kind, err := Network(d.Network)
	if err != nil {
		return zero, err
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = dialTimeout
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t, cred, err := d.Local.dialSocket(hctx, d.Network, d.Addr)
	if err != nil {
		return zero, connectErr(hctx, d.Addr, timeout, err)
	}
	wc := wire.NewConn(t, d.Local.ConnConfig(kind))
	tcpConn := kind == datapath.KindTCP
	local := d.Local.HelloFor(kind, tcpConn && d.Want != datapath.KindTCP && !d.Lane)
	if d.Lane {
		local.Caps |= wire.CapLane
	}
	what := "handshake with " + d.Addr
	// A wait of the handshake that ended at hctx's deadline (the peer
	// did not answer by then) is a gxerr.Timeout too, as the connect's.
	bound := func(err error) error {
		return boundErr(hctx, fmt.Sprintf("%s: no answer by the dial's deadline (at most %v)", what, timeout), err)
	}
	fail := func(kind error, err error) (P, error) {
		_ = wc.Close()
		return zero, bound(gxerr.New(kind, what, err))
	}
	if err := wc.Send(&local); err != nil {
		return fail(gxerr.Peer, err)
	}
	if local.Caps&wire.CapAuth != 0 {
		if err := authDialer(hctx, wc, d.Local.Secret, local); err != nil {
			if errors.Is(err, gxerr.Unauthenticated) {
				_ = wc.Close()
				return zero, fmt.Errorf("gxfer: %s: %w", what, err)
			}
			return fail(gxerr.Peer, err)
		}
	}
	f, err := wc.Recv(hctx)
	if err != nil {
		return fail(gxerr.Peer, err)
	}
	var ack wire.HelloAck
	if err := f.DecodeOrError(&ack); err != nil {
		if we, ok := err.(*wire.Error); ok && we.Code == wire.StatusNoResources {
			return fail(gxerr.TooManyPeers, gxerr.New(gxerr.Peer, "", we))
		}
		if we, ok := err.(*wire.Error); ok && we.Code == wire.StatusRefused && tcpConn {
			return fail(gxerr.Unauthenticated, we)
		}
		return fail(gxerr.Peer, err)
	}
	if err := wire.CheckAck(local, ack); err != nil {
		return fail(gxerr.Peer, err)
	}
	if cred != nil {
		if err := checkIdentity(ack.Hello, *cred); err != nil {
			return fail(gxerr.Peer, err)
		}
	}
	if d.LaneOf != nil && ack.EngineID != *d.LaneOf {
		// Another engine answers at the address (a name spread over
		// several, a port taken over): what the endpoint sends over the
		// lane would go to it.
		return fail(gxerr.Peer, fmt.Errorf("the lane reached another engine (peer %q, pid %d) than its endpoint's", ack.Name, ack.PID))
	}
	if d.Want == datapath.KindRDMA && ack.Accepted&wire.CapRDMA == 0 {
		_ = wc.Close()
		return zero, gxerr.New(gxerr.NotSupported, fmt.Sprintf("transport rdma: peer %q (pid %d at %s) does not offer RDMA (no usable RDMA device there, or RDMA disabled)",
			ack.Name, ack.PID, d.Addr), nil)
	}
	path, addr := pathFor(kind, ack.Accepted), ""
	if tcpConn {
		addr = d.Addr
	}
	ep, _, err := connect(hctx, wc, ack.Hello, path, addr, true)
	if err != nil && path == datapath.KindRDMA && !errors.Is(err, gxerr.Closed) {
		return zero, bound(gxerr.New(gxerr.Peer, what, err)) // the queue pairs' setup
	}
	return ep, err
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
