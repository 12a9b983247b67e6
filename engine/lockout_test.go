package engine

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/handshake"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// attack opens silent and hello-only connections to a listener at about
// rate per second for d (bounded in count and time), keeping them open
// until it stops; it returns how many it opened.
func attack(ctx context.Context, network, addr string, rate int, d time.Duration) int {
	var conns []interface{ Close() error }
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.After(d)
	max := rate * int(d/time.Second+1)
	for i := 0; i < max; i++ {
		select {
		case <-tick.C:
		case <-end:
			return len(conns)
		case <-ctx.Done():
			return len(conns)
		}
		var t wire.Transport
		var hello wire.Hello
		if network == "unix" {
			ic, err := ipc.Dial(ctx, addr, ipc.Config{})
			if err != nil {
				continue
			}
			t, hello = ic, rawHello(uint32(os.Getpid()))
		} else {
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				continue
			}
			t, hello = wire.NewStreamTransport(nc), fakeHello()
		}
		c := wire.NewConn(t, wire.ConnConfig{MaxFrame: handshake.IPCMaxFrame})
		conns = append(conns, c)
		if i%2 == 1 { // hello-only: then nothing (a real one would heartbeat)
			_ = c.Send(&hello)
		}
	}
	return len(conns)
}

// Issue 16 item 3: silent and hello-only connections opened at 200 per
// second do not lock out legitimate peers: at least 99% of their Dials
// succeed (handshakes beyond the slots evict the oldest pending one;
// peers beyond Config.MaxPeers evict the oldest idle endpoint).
func TestRegressIdleConnectionsDoNotLockOut(t *testing.T) {
	for _, mode := range []string{"unix", "tcp", "tcp+secret"} {
		t.Run(mode, func(t *testing.T) {
			network := mode
			cfg := Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 1, MaxPeers: 32}
			if mode == "tcp+secret" { // the hostile peers cannot authenticate
				network, cfg.ClusterSecret = "tcp", []byte("the cluster's shared secret, 32B")
			}
			owner, peer := newEngine(t, cfg), newEngine(t, cfg)
			l := listenLocal(t, owner, network)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			var opened int
			wg.Add(1)
			go func() { defer wg.Done(); opened = attack(ctx, network, l.Addr(), 200, 2*time.Second) }()
			time.Sleep(300 * time.Millisecond) // the attack is under way
			const dials = 100
			ok := 0
			var last error
			for i := 0; i < dials; i++ {
				dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
				ep, err := peer.Dial(dctx, network, l.Addr())
				dcancel()
				if err != nil {
					last = err
					continue
				}
				ok++
				_ = ep.Close()
				time.Sleep(10 * time.Millisecond)
			}
			wg.Wait()
			t.Logf("%s: %d of %d dials succeeded beside %d hostile connections (last error: %v)", mode, ok, dials, opened, last)
			require.GreaterOrEqual(t, ok, dials*99/100)
		})
	}
}

// Issue 16 item 3: at Config.MaxPeers busy endpoints a new peer is refused
// with ErrTooManyPeers; an idle one (no request made) is closed to make
// room instead.
func TestMaxPeersRefusesWithTypedError(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Devices: DevicesNone, MaxPeers: 2}
	owner, peer := newEngine(t, cfg), newEngine(t, cfg)
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	defer l.Close()
	b, err := owner.Alloc(4096, Host)
	require.NoError(t, err)
	k, err := b.Export()
	require.NoError(t, err)
	src, err := peer.Alloc(4096, Host)
	require.NoError(t, err)
	idle, err := peer.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	busy, err := peer.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	require.NoError(t, busy.PutSync(ctx, src.All(), k))
	third, err := peer.Dial(ctx, "unix", l.Addr()) // evicts the idle one
	require.NoError(t, err)
	select {
	case <-idle.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the idle peer was not closed")
	}
	require.NoError(t, third.PutSync(ctx, src.All(), k))
	_, err = peer.Dial(ctx, "unix", l.Addr())
	require.ErrorIs(t, err, ErrTooManyPeers)
	require.NoError(t, busy.PutSync(ctx, src.All(), k))
}

// TestMaxPeersPerSourceRefuses: Config.MaxPeersPerSource reaches the
// listener: with MaxPeersPerSource busy endpoints from one source (here,
// this process: a unix peer's source is its pid), that source's next
// Dial is refused with ErrTooManyPeers although the listener has room
// (MaxPeers), and the busy endpoints stay up. Other sources' admission
// is tested in internal/handshake (TestPeersPerSourceBound).
func TestMaxPeersPerSourceRefuses(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Devices: DevicesNone, MaxPeers: 4, MaxPeersPerSource: 2}
	owner, peer := newEngine(t, cfg), newEngine(t, cfg)
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	defer l.Close()
	b, err := owner.Alloc(4096, Host)
	require.NoError(t, err)
	k, err := b.Export()
	require.NoError(t, err)
	src, err := peer.Alloc(4096, Host)
	require.NoError(t, err)
	var busy []*Endpoint
	for range 2 {
		ep, err := peer.Dial(ctx, "unix", l.Addr())
		require.NoError(t, err)
		require.NoError(t, ep.PutSync(ctx, src.All(), k))
		busy = append(busy, ep)
	}
	// Both endpoints made on the owner's side (Accept returns them only
	// then): a dialer may make requests before its listener has recorded
	// the endpoint as made, and one not yet recorded is taken for one
	// still connecting, which a newcomer may replace (a race left open,
	// see the session 33 note); this test is about endpoints in use.
	for range busy {
		_, err := l.Accept(ctx)
		require.NoError(t, err)
	}
	_, err = peer.Dial(ctx, "unix", l.Addr())
	require.ErrorIs(t, err, ErrTooManyPeers)
	for _, ep := range busy {
		require.NoError(t, ep.PutSync(ctx, src.All(), k))
	}
}
