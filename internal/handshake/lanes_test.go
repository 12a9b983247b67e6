package handshake

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// TestLanesSparedOnlyWithTheirEndpoint: at MaxPeers a lane is spared
// while an endpoint of its engine is admitted (its failure would fail
// that endpoint at the dialer); a connection that merely claims to be a
// lane (wire.CapLane), with no endpoint of its engine here, is as
// evictable as any idle endpoint. Before, no lane was ever evicted: a
// peer that opened MaxPeers silent "lanes" locked every dialer out with
// TooManyPeers.
func TestLanesSparedOnlyWithTheirEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		endpoint bool // the lanes' engine has an endpoint here, busy
		err      error
	}{
		{"forged lanes, no endpoint", false, nil},
		{"lane of a busy endpoint", true, gxerr.TooManyPeers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, hostile, newcomer := newSide(t, nil, false), newSide(t, nil, false), newSide(t, nil, false)
			l := ls.listen(t, "tcp", 2, false)
			conns := 0
			if tc.endpoint {
				_, err := hostile.dial(l, "tcp", datapath.KindTCP, false)
				require.NoError(t, err)
				conns++
			}
			for conns < 2 {
				_, err := hostile.dial(l, "tcp", datapath.KindTCP, true)
				require.NoError(t, err)
				conns++
			}
			require.Eventually(t, func() bool { return len(ls.all()) == 2 }, 5*time.Second, time.Millisecond)
			for _, p := range ls.all() {
				p.active.Store(p.hello.Caps&wire.CapLane == 0) // the endpoint made a request; lanes stay silent
			}

			_, err := newcomer.dial(l, "tcp", datapath.KindTCP, false)
			l.evictionsDone()
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				for _, p := range ls.all() {
					require.NoError(t, p.Err(), "the busy endpoint and its lane stay up")
				}
				return
			}
			require.NoError(t, err, "silent forged lanes hold the listener's every slot")
			closed := 0
			for _, p := range ls.all()[:2] {
				if p.Err() != nil {
					require.ErrorIs(t, p.Err(), gxerr.Peer)
					closed++
				}
			}
			require.Equal(t, 1, closed, "a forged lane was closed to make room")
		})
	}
}

// TestLanesSparedPerEndpointBounded: a busy endpoint's lanes are spared
// up to the most a Dial opens (MaxLanes-1 per endpoint of their engine,
// the oldest); the lanes a peer opens beyond, with the same engine ID,
// are evicted like any idle peer. Before, every lane of an engine with
// one busy endpoint here was spared: a peer that opened one endpoint,
// made a request and then MaxPeers lanes locked every dialer out with
// TooManyPeers.
func TestLanesSparedPerEndpointBounded(t *testing.T) {
	const extra = 2 // lanes beyond the bound
	const maxPeers = 1 + MaxLanes - 1 + extra
	ls, hostile, newcomer := newSide(t, nil, false), newSide(t, nil, false), newSide(t, nil, false)
	l := ls.listen(t, "tcp", maxPeers, false)
	for i := range maxPeers { // the endpoint, then its lanes
		_, err := hostile.dial(l, "tcp", datapath.KindTCP, i > 0)
		require.NoError(t, err, "connection %d", i)
		// Made at the listener before the next is admitted: ls.all()
		// is in admission order.
		require.Eventually(t, func() bool { return len(ls.all()) == i+1 }, 5*time.Second, time.Millisecond)
	}
	held := ls.all()
	held[0].active.Store(true) // the endpoint made a request; its lanes stay silent

	for i := range extra {
		_, err := newcomer.dial(l, "tcp", datapath.KindTCP, false)
		require.NoError(t, err, "newcomer %d: the lanes beyond the bound hold the listener's every slot", i)
		l.evictionsDone()
		require.ErrorIs(t, held[MaxLanes+i].Err(), gxerr.Peer, "the oldest lane beyond the bound was closed for newcomer %d", i)
		for j, p := range held[:MaxLanes] {
			require.NoError(t, p.Err(), "newcomer %d: the endpoint and its first MaxLanes-1 lanes stay up (%d)", i, j)
		}
		require.Eventually(t, func() bool { return len(ls.all()) == maxPeers+i+1 }, 5*time.Second, time.Millisecond)
		for _, p := range ls.all()[maxPeers:] {
			p.active.Store(true) // the newcomers are busy: the next one must not close them
		}
	}
}
