package handshake

import (
	"context"
	"net"
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
		require.NoError(t, honest.Err(), "the honest idle endpoint was closed for hostile endpoint %d", i)
	}
}
