package handshake

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// TestPendingPerSource: silent connections flooding a TCP listener from
// other sources (127.0.0.2 and up: every 127/8 address is a source of its
// own on Linux loopback) do not evict the handshake of an honest dialer
// from 127.0.0.1 that was in progress before them: a source beyond its
// share evicts its own. Before, every connection evicted the oldest
// pending one whatever its source, so one source opening MaxPending
// connections closed every other handshake in progress.
func TestPendingPerSource(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sources   int // flooding sources: 127.0.0.2, .3...
		perSource int // silent connections from each
	}{
		{"one source", 1, MaxPending + 8},
		{"five sources", 5, DefaultMaxPendingPerSource + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, ds := newSide(t, nil, false), newSide(t, nil, false)
			l, err := Listen(ListenConfig[*peer]{Local: ls.local, Network: "tcp", Addr: "127.0.0.1:0", MaxPeers: 8, Connect: ls.connect,
				HandshakeTimeout: time.Minute}) // a hang guard only: nothing here waits for it
			require.NoError(t, err)
			defer func() { require.NoError(t, l.Close()) }()

			// The honest dialer connects first (its handshake is pending
			// before the flood's: the listener accepts in order)...
			hc, err := net.Dial("tcp", l.Addr())
			require.NoError(t, err)
			honest := wire.NewConn(tcp.Frame(hc, 0), ds.local.ConnConfig(datapath.KindTCP))
			defer honest.Close()
			var flood []net.Conn
			defer func() {
				for _, c := range flood {
					_ = c.Close()
				}
			}()
			for s := range tc.sources {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+s))}}
				for range tc.perSource {
					c, err := d.Dial("tcp", l.Addr())
					require.NoError(t, err)
					flood = append(flood, c)
				}
			}
			// ...a Dial after the flood is served once the listener has
			// taken every connection of the flood (it accepts them in
			// order)...
			_, err = ds.dial(l, "tcp", datapath.KindTCP, false)
			require.NoError(t, err)
			// ...and the honest dialer's handshake is still there to finish.
			hello := ds.local.HelloFor(datapath.KindTCP, false)
			require.NoError(t, honest.Send(&hello))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a hang guard only
			defer cancel()
			f, err := honest.Recv(ctx)
			require.NoError(t, err, "the honest handshake was evicted by the flood")
			var ack wire.HelloAck
			require.NoError(t, f.DecodeOrError(&ack))
		})
	}
}

// TestSourceOf: the sources pending handshakes are counted by.
func TestSourceOf(t *testing.T) {
	for _, tc := range []struct {
		raddr string
		cred  *ipc.Cred
		want  string
	}{
		{"127.0.0.2:4000", nil, "127.0.0.2"},
		{"127.0.0.2:4001", nil, "127.0.0.2"},
		{"[::ffff:10.0.0.1]:80", nil, "10.0.0.1"},
		{"[2001:db8:1:2:3::1]:80", nil, "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::9]:81", nil, "2001:db8:1:2::/64"},
		{"[fe80::1%lo]:80", nil, "fe80::/64"},
		{"", &ipc.Cred{PID: 42, UID: 1}, "pid 42"},
		{"not an address", nil, "not an address"},
	} {
		require.Equal(t, tc.want, sourceOf(tc.raddr, tc.cred), "%q %v", tc.raddr, tc.cred)
	}
}

// TestMaxPeersPerSource: at MaxPeers, the idle endpoint closed to make
// room is one of the source holding the most endpoints: a peer opening
// endpoints from 127.0.0.2 in a loop closes its own, not the idle
// endpoint of an honest dialer from 127.0.0.1 (waiting for work, say).
// Before, the oldest idle endpoint was closed whatever its source, so
// one host could push every idle peer out.
func TestMaxPeersPerSource(t *testing.T) {
	const maxPeers = 4
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	l := ls.listen(t, "tcp", maxPeers, false)
	_, err := ds.dial(l, "tcp", datapath.KindTCP, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(ls.all()) == 1 }, 5*time.Second, time.Millisecond)
	honest := ls.all()[0]
	hostile := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for i := range 2 * maxPeers {
		c, err := hostile.Dial("tcp", l.Addr())
		require.NoError(t, err)
		wc := wire.NewConn(tcp.Frame(c, 0), ds.local.ConnConfig(datapath.KindTCP))
		defer wc.Close()
		hello := ds.local.HelloFor(datapath.KindTCP, false)
		require.NoError(t, wc.Send(&hello))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a hang guard only
		f, err := wc.Recv(ctx)
		cancel()
		require.NoError(t, err, "hostile endpoint %d", i)
		var ack wire.HelloAck
		require.NoError(t, f.DecodeOrError(&ack), "hostile endpoint %d", i)
		// Admitted, so whatever was closed to make room is closed.
		l.evictionsDone()
		require.NoError(t, honest.Err(), "the honest idle endpoint was closed for hostile endpoint %d", i)
	}
}

// TestPeersPerSourceBound: a source holds at most MaxPeersPerSource of a
// listener's endpoints. One that reaches its bound with endpoints that
// each made a request (busy: never closed to make room) is refused with
// StatusNoResources (the dialer's TooManyPeers), and one with idle
// endpoints closes its own oldest; either way a dialer from another
// source still gets in. Before, a source (127.0.0.2 here) could take all
// MaxPeers slots with busy endpoints, and every other host's Dial failed
// with TooManyPeers.
func TestPeersPerSourceBound(t *testing.T) {
	const maxPeers, perSource = 8, 4
	for _, tc := range []struct {
		name string
		busy bool // each of the source's endpoints makes a request
	}{
		{"busy endpoints", true},
		{"idle endpoints", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, ds := newSide(t, nil, false), newSide(t, nil, false)
			l, err := Listen(ListenConfig[*peer]{Local: ls.local, Network: "tcp", Addr: "127.0.0.1:0", MaxPeers: maxPeers,
				MaxPeersPerSource: perSource, Connect: ls.connect})
			require.NoError(t, err)
			defer func() { require.NoError(t, l.Close()) }()
			hostile := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
			admitted := 0
			for i := range maxPeers {
				c, err := hostile.Dial("tcp", l.Addr())
				require.NoError(t, err)
				wc := wire.NewConn(tcp.Frame(c, 0), ds.local.ConnConfig(datapath.KindTCP))
				defer wc.Close()
				hello := ds.local.HelloFor(datapath.KindTCP, false)
				require.NoError(t, wc.Send(&hello))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a hang guard only
				f, err := wc.Recv(ctx)
				cancel()
				require.NoError(t, err, "hostile endpoint %d", i)
				var ack wire.HelloAck
				if err := f.DecodeOrError(&ack); err != nil {
					var we *wire.Error
					require.ErrorAs(t, err, &we, "hostile endpoint %d", i)
					require.Equal(t, wire.StatusNoResources, we.Code, "hostile endpoint %d", i)
					continue
				}
				admitted++
				require.Eventually(t, func() bool { return len(ls.all()) == admitted }, 5*time.Second, time.Millisecond)
				ls.all()[admitted-1].active.Store(tc.busy)
			}
			_, err = ds.dial(l, "tcp", datapath.KindTCP, false)
			require.NoError(t, err, "a dialer from 127.0.0.1 is locked out by 127.0.0.2's endpoints")
			l.evictionsDone()
			live := 0
			for _, p := range ls.all() {
				if strings.HasPrefix(p.addr, "127.0.0.2:") && p.Err() == nil {
					live++
				}
			}
			require.Equal(t, perSource, live, "the source's endpoints left open")
			if tc.busy {
				require.Equal(t, perSource, admitted, "busy endpoints beyond the source's bound are refused")
			}
		})
	}
}

// TestDefaultMaxPeersPerSource: a quarter of MaxPeers, at least MaxLanes,
// at most MaxPeers.
func TestDefaultMaxPeersPerSource(t *testing.T) {
	for _, tc := range []struct{ maxPeers, want int }{
		{1, 1}, {4, 4}, {MaxLanes, MaxLanes}, {100, MaxLanes}, {4 * MaxLanes, MaxLanes}, {1024, 256}, {1 << 20, 1 << 18},
	} {
		require.Equal(t, tc.want, DefaultMaxPeersPerSource(tc.maxPeers), "MaxPeers %d", tc.maxPeers)
	}
}
