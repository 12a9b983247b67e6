package handshake

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// TestLanesSparedOnlyFromTheirEndpointsSource: a lane is spared at
// MaxPeers only while an endpoint of its engine from its own source is
// admitted. Connections from another source (127.0.0.2) that claim to be
// lanes (wire.CapLane) of a busy engine's endpoint (its EngineID, which
// every key it exported carries as Owner) are as evictable as any idle
// peer: a newcomer gets in. Before, they were spared for as long as that
// endpoint lived: a hostile host holding them locked newcomers out with
// TooManyPeers although it never made a request. The honest engine's own
// lane (same source) is still spared.
func TestLanesSparedOnlyFromTheirEndpointsSource(t *testing.T) {
	for _, tc := range []struct {
		name   string
		forged bool // the claimed lanes come from 127.0.0.2, else they are the honest engine's own
		err    error
	}{
		{"forged lanes from another source", true, nil},
		{"the endpoint's own lanes", false, gxerr.TooManyPeers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, honest, newcomer := newSide(t, nil, false), newSide(t, nil, false), newSide(t, nil, false)
			const maxPeers = 3
			l := ls.listen(t, "tcp", maxPeers, false)
			_, err := honest.dial(l, "tcp", datapath.KindTCP, false)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(ls.all()) == 1 }, 5*time.Second, time.Millisecond)
			ls.all()[0].active.Store(true) // the honest endpoint is busy
			for i := 1; i < maxPeers; i++ {
				if !tc.forged {
					_, err := honest.dial(l, "tcp", datapath.KindTCP, true)
					require.NoError(t, err)
					continue
				}
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
				c, err := d.Dial("tcp", l.Addr())
				require.NoError(t, err)
				wc := wire.NewConn(tcp.Frame(c, 0), honest.local.ConnConfig(datapath.KindTCP))
				defer wc.Close()
				hello := honest.local.HelloFor(datapath.KindTCP, false) // the honest engine's EngineID
				hello.Caps |= wire.CapLane
				require.NoError(t, wc.Send(&hello))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a hang guard only
				f, err := wc.Recv(ctx)
				cancel()
				require.NoError(t, err)
				var ack wire.HelloAck
				require.NoError(t, f.DecodeOrError(&ack), "forged lane %d admitted", i)
			}
			require.Eventually(t, func() bool { return len(ls.all()) == maxPeers }, 5*time.Second, time.Millisecond)

			_, err = newcomer.dial(l, "tcp", datapath.KindTCP, false)
			l.evictionsDone()
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err, "the forged lanes locked the newcomer out")
			}
			require.NoError(t, ls.all()[0].Err(), "the honest endpoint was closed")
		})
	}
}
