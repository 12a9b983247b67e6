package handshake

import (
	"context"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// peer is an endpoint as the tests' Connect makes it.
type peer struct {
	wc     *wire.Conn
	hello  wire.Hello
	path   datapath.Kind
	addr   string
	dialer bool
	active atomic.Bool // sticky: the peer is active whenever the listener looks
	pulse  atomic.Bool // active once, until the listener takes it
	busy   atomic.Bool // InFlight
	mu     sync.Mutex
	err    error
	// onEvict (optional) runs as Evict begins: a Bye on its way to a
	// peer that reads slowly (ctrlchan's Evict waits for it).
	onEvict func()
}

func (p *peer) Name() string       { return "peer " + p.hello.Name }
func (p *peer) TakeActivity() bool { return p.active.Load() || p.pulse.Swap(false) }
func (p *peer) InFlight() bool     { return p.busy.Load() }
func (p *peer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
func (p *peer) Fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		_ = p.wc.Close()
	}
}
func (p *peer) Evict(what string) {
	if p.onEvict != nil {
		p.onEvict()
	}
	p.Fail(p.PeerErr(what, nil))
}
func (p *peer) PeerErr(what string, cause error) error { return gxerr.New(gxerr.Peer, what, cause) }

// side is one engine's handshakes: the peers its Connect made.
type side struct {
	local   *Local
	onEvict func() // the peers' (set before the first connection)
	mu      sync.Mutex
	peers   []*peer
}

func newSide(t *testing.T, secret []byte, rdma bool) *side {
	h := wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Caps: wire.CapFDPassing | wire.CapSharedHost,
		PID: uint32(os.Getpid()), UID: uint32(os.Getuid()), Name: t.Name()}
	_, _ = rand.Read(h.EngineID[:])
	s := &side{local: &Local{Hello: h, Secret: secret, RDMA: rdma}}
	t.Cleanup(func() {
		for _, p := range s.all() {
			p.Fail(gxerr.Closed)
		}
	})
	return s
}

func (s *side) all() []*peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*peer(nil), s.peers...)
}

// connect makes a peer as the engine does: recorded by the listener
// (Made) before it could serve, closed if its slot went meanwhile.
func (s *side) connect(ctx context.Context, wc *wire.Conn, h wire.Hello, path datapath.Kind, addr string, dialer bool) (*peer, Peer, error) {
	p := &peer{wc: wc, hello: h, path: path, addr: addr, dialer: dialer, onEvict: s.onEvict}
	if err := Made(ctx, p); err != nil {
		p.Fail(err)
		return nil, nil, err
	}
	s.mu.Lock()
	s.peers = append(s.peers, p)
	s.mu.Unlock()
	return p, p, nil
}

func (s *side) listen(t *testing.T, network string, maxPeers int, offerRDMA bool) *Listener[*peer] {
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "l.sock")
	}
	// Every test peer is of one source: it may take every slot (the
	// bound per source has tests of its own).
	l, err := Listen(ListenConfig[*peer]{Local: s.local, Network: network, Addr: addr, MaxPeers: maxPeers, MaxPeersPerSource: maxPeers,
		OfferRDMA: offerRDMA, Connect: s.connect})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

func (s *side) dial(l *Listener[*peer], network string, want datapath.Kind, lane bool) (*peer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return Dial(ctx, DialConfig{Local: s.local, Network: network, Addr: l.Addr(), Want: want, Lane: lane}, s.connect)
}

// TestDialListen: over a unix socket and TCP, both sides make their
// endpoint with the data path chosen (RDMA when both offer it), the
// listener hands it to Accept, lanes are served but not accepted.
func TestDialListen(t *testing.T) {
	for _, tc := range []struct {
		name, network  string
		rdmaL, rdmaD   bool
		want, wantPath datapath.Kind
	}{
		{"unix", "unix", false, false, datapath.KindAuto, datapath.KindIPC},
		{"tcp", "tcp", false, false, datapath.KindTCP, datapath.KindTCP},
		{"tcp auto without rdma", "tcp", false, true, datapath.KindAuto, datapath.KindTCP},
		{"tcp auto with rdma", "tcp", true, true, datapath.KindAuto, datapath.KindRDMA},
		{"tcp forced tcp", "tcp", true, true, datapath.KindTCP, datapath.KindTCP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, ds := newSide(t, nil, tc.rdmaL), newSide(t, nil, tc.rdmaD)
			l := ls.listen(t, tc.network, 8, tc.rdmaL)
			require.Equal(t, tc.network == "unix", l.Kind() == datapath.KindIPC)
			d, err := ds.dial(l, tc.network, tc.want, false)
			require.NoError(t, err)
			require.True(t, d.dialer)
			require.Equal(t, tc.wantPath, d.path)
			require.Equal(t, ls.local.Hello.EngineID, d.hello.EngineID)
			require.Equal(t, tc.network == "tcp", d.addr != "", "TCP peers are named by address")
			a, err := l.Accept(context.Background())
			require.NoError(t, err)
			require.False(t, a.dialer)
			require.Equal(t, tc.wantPath, a.path)
			require.Equal(t, ds.local.Hello.EngineID, a.hello.EngineID)

			_, err = ds.dial(l, tc.network, tc.want, true) // a lane
			require.NoError(t, err)
			short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err = l.Accept(short)
			require.ErrorIs(t, err, context.DeadlineExceeded, "lanes are not accepted")
			require.Eventually(t, func() bool { return len(ls.all()) == 2 }, 5*time.Second, time.Millisecond)
		})
	}
}

// TestDialRefusals: typed errors of the dialer.
func TestDialRefusals(t *testing.T) {
	secret := []byte("the cluster's shared secret, 32B")
	other := []byte("another cluster's secret, 32 byt")
	for _, tc := range []struct {
		name             string
		lsecret, dsecret []byte
		rdmaL            bool
		want             datapath.Kind
		err              error
	}{
		{"rdma not offered", nil, nil, false, datapath.KindRDMA, gxerr.NotSupported},
		{"dialer without secret", secret, nil, false, datapath.KindTCP, gxerr.Unauthenticated},
		{"listener without secret", nil, secret, false, datapath.KindTCP, gxerr.Unauthenticated},
		{"other secret", secret, other, false, datapath.KindTCP, gxerr.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, ds := newSide(t, tc.lsecret, tc.rdmaL), newSide(t, tc.dsecret, true)
			l := ls.listen(t, "tcp", 8, true)
			_, err := ds.dial(l, "tcp", tc.want, false)
			require.ErrorIs(t, err, tc.err)
			require.Empty(t, ds.all(), "the dialer made no endpoint")
			if tc.err == gxerr.Unauthenticated {
				time.Sleep(20 * time.Millisecond)
				require.Empty(t, ls.all(), "the listener made no endpoint")
			}
		})
	}
	_, err := Network("udp")
	require.ErrorIs(t, err, gxerr.NotSupported)
	require.ErrorIs(t, CheckSecret([]byte("short")), gxerr.Invalid)
	require.NoError(t, CheckSecret(nil))
	ds := newSide(t, nil, false)
	_, err = Dial(context.Background(), DialConfig{Local: ds.local, Network: "tcp", Addr: "127.0.0.1:1"}, ds.connect)
	require.ErrorIs(t, err, gxerr.Peer)
}

// TestMaxPeers: at MaxPeers endpoints an idle one is closed to make room;
// when all are busy the newcomer is refused with TooManyPeers.
func TestMaxPeers(t *testing.T) {
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	l := ls.listen(t, "unix", 2, false)
	for i := 0; i < 2; i++ {
		_, err := ds.dial(l, "unix", 0, false)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(ls.all()) == 2 }, 5*time.Second, time.Millisecond)
	first := ls.all()[0]
	ls.all()[1].active.Store(true)
	_, err := ds.dial(l, "unix", 0, false)
	require.NoError(t, err)
	l.evictionsDone()
	require.ErrorIs(t, first.Err(), gxerr.Peer, "the idle peer was closed")
	require.Eventually(t, func() bool { return len(ls.all()) == 3 }, 5*time.Second, time.Millisecond)
	ls.all()[2].active.Store(true)
	_, err = ds.dial(l, "unix", 0, false)
	require.ErrorIs(t, err, gxerr.TooManyPeers)
	require.ErrorIs(t, err, gxerr.Peer)
}

// TestPendingEviction: beyond MaxPending handshakes in progress, the
// oldest connection is closed; a real peer still gets in.
func TestPendingEviction(t *testing.T) {
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	l := ls.listen(t, "tcp", 8, false)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := 0; i < MaxPending+1; i++ {
		c, err := net.Dial("tcp", l.Addr())
		require.NoError(t, err)
		conns = append(conns, c)
	}
	require.NoError(t, conns[0].SetReadDeadline(time.Now().Add(time.Second))) // before the handshake deadline (2 s)
	_, err := conns[0].Read(make([]byte, 1))
	require.Error(t, err)
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the oldest silent connection was evicted")
	_, err = ds.dial(l, "tcp", datapath.KindTCP, false)
	require.NoError(t, err)
}

// TestIdentity: a Hello claiming another process than the socket's is
// refused on both sides.
func TestIdentity(t *testing.T) {
	require.NoError(t, checkIdentity(wire.Hello{PID: 5, UID: 7}, ipc.Cred{PID: 5, UID: 7}))
	require.Error(t, checkIdentity(wire.Hello{PID: 5, UID: 7}, ipc.Cred{PID: 6, UID: 7}))
	require.Error(t, checkIdentity(wire.Hello{PID: 5, UID: 7}, ipc.Cred{PID: 5, UID: 8}))
	require.Error(t, checkIdentity(wire.Hello{PID: 5, UID: 7}, ipc.Cred{}))

	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	ds.local.Hello.PID++ // a lie
	l := ls.listen(t, "unix", 8, false)
	_, err := ds.dial(l, "unix", 0, false)
	require.ErrorIs(t, err, gxerr.Peer)
	ls2 := newSide(t, nil, false)
	ls2.local.Hello.PID++
	ds2 := newSide(t, nil, false)
	l2 := ls2.listen(t, "unix", 8, false)
	_, err = ds2.dial(l2, "unix", 0, false)
	require.ErrorIs(t, err, gxerr.Peer)
	require.Empty(t, ds2.all())
}

// TestLocal: the Hello and framing of each kind of connection.
func TestLocal(t *testing.T) {
	l := &Local{Hello: wire.Hello{Caps: wire.CapFDPassing | wire.CapSharedHost}, RDMA: true, Secret: []byte("s"), PeerTimeout: 8 * time.Second}
	h := l.HelloFor(datapath.KindIPC, true)
	require.Equal(t, wire.CapFDPassing|wire.CapSharedHost|wire.CapHeartbeat|wire.CapUseReport|wire.CapMessages|wire.CapMsgRing|wire.CapByeReason, h.Caps)
	h = l.HelloFor(datapath.KindTCP, true)
	require.NotZero(t, h.Caps&wire.CapByeReason)
	require.NotZero(t, h.Caps&wire.CapUseReport, "an RDMA endpoint's use sends no frame: its heartbeats report it")
	require.NotZero(t, h.Caps&wire.CapRDMA)
	require.NotZero(t, h.Caps&wire.CapAuth)
	require.Zero(t, h.Caps&wire.CapFDPassing)
	require.NotZero(t, h.Caps&wire.CapMessages)
	require.Zero(t, l.HelloFor(datapath.KindTCP, false).Caps&wire.CapRDMA)
	c := l.ConnConfig(datapath.KindIPC)
	require.Equal(t, IPCMaxFrame, c.MaxFrame)
	require.Equal(t, 8*time.Second, c.ReadTimeout)
	c = l.ConnConfig(datapath.KindTCP)
	require.Equal(t, 8*time.Second, c.WriteTimeout)
}
