package handshake

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// listenIdle is side.listen with MaxPeers maxPeers (all from the tests'
// one source) and PeerIdleEvict idle.
func (s *side) listenIdle(t *testing.T, maxPeers int, idle time.Duration) *Listener[*peer] {
	l, err := Listen(ListenConfig[*peer]{Local: s.local, Network: "unix", Addr: filepath.Join(t.TempDir(), "l.sock"),
		MaxPeers: maxPeers, MaxPeersPerSource: maxPeers, PeerIdleEvict: idle, Connect: s.connect})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// taken waits until the listener took p's pulse of activity.
func taken(t *testing.T, p *peer) {
	t.Helper()
	require.Eventually(t, func() bool { return !p.pulse.Load() }, 5*time.Second, time.Millisecond, "the listener never noted the activity")
}

// dialUntilIn dials until the listener admits the newcomer (bounded):
// every refusal before is TooManyPeers.
func dialUntilIn(t *testing.T, s *side, l *Listener[*peer]) {
	t.Helper()
	for i := 0; ; i++ {
		_, err := s.dial(l, "unix", 0, false)
		if err == nil {
			return
		}
		require.ErrorIs(t, err, gxerr.TooManyPeers)
		require.Less(t, i, 500, "never admitted")
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPeerIdleEvict: at MaxPeers, an endpoint that made a request is
// closed to make room once it has been idle for PeerIdleEvict, never
// while it (or a lane of its engine) has work in flight, nor with
// PeerIdleEvict 0; nor is an endpoint that never made a request while it
// has work in flight (this side's own request on it).
func TestPeerIdleEvict(t *testing.T) {
	const idle = 20 * time.Millisecond
	tests := []struct {
		name     string
		idle     time.Duration
		active   bool // the endpoint made a request (then went idle)
		inFlight bool // it has work in flight
		laneBusy bool // a lane of its engine has work in flight
		evicted  bool
	}{
		{"idle after a request", idle, true, false, false, true},
		{"in flight", idle, true, true, false, false},
		{"lane in flight", idle, true, false, true, false},
		{"PeerIdleEvict 0", 0, true, false, false, false},
		{"never active, in flight", idle, false, true, false, false},
		{"never active", idle, false, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls, ds, other := newSide(t, nil, false), newSide(t, nil, false), newSide(t, nil, false)
			l := ls.listenIdle(t, 2, tt.idle)
			_, err := ds.dial(l, "unix", 0, false)
			require.NoError(t, err)
			_, err = ds.dial(l, "unix", 0, true) // a lane of its engine, spared (MaxLanes)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(ls.all()) == 2 }, 5*time.Second, time.Millisecond)
			ep, lane := ls.all()[0], ls.all()[1]
			if ep.hello.Caps&wire.CapLane != 0 {
				ep, lane = lane, ep
			}
			ep.busy.Store(tt.inFlight)
			lane.busy.Store(tt.laneBusy)
			if tt.active {
				ep.pulse.Store(true)
				if tt.idle > 0 {
					taken(t, ep)
				}
			}
			time.Sleep(5 * idle) // idle for longer than PeerIdleEvict
			_, err = other.dial(l, "unix", 0, false)
			l.evictionsDone()
			if !tt.evicted {
				require.ErrorIs(t, err, gxerr.TooManyPeers)
				require.NoError(t, ep.Err())
				return
			}
			require.NoError(t, err)
			require.ErrorIs(t, ep.Err(), gxerr.Peer)
			require.NoError(t, lane.Err())
		})
	}
}

// TestPeerIdleEvictLongestIdle: of the endpoints idle for PeerIdleEvict,
// the one idle the longest is closed first, not the oldest.
func TestPeerIdleEvictLongestIdle(t *testing.T) {
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	l := ls.listenIdle(t, 2, 20*time.Millisecond)
	for i := range 2 { // admitted one after the other
		_, err := ds.dial(l, "unix", 0, false)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(ls.all()) == i+1 }, 5*time.Second, time.Millisecond)
	}
	older, newer := ls.all()[0], ls.all()[1]
	newer.pulse.Store(true)
	taken(t, newer)
	time.Sleep(time.Millisecond)
	older.pulse.Store(true)
	taken(t, older)
	dialUntilIn(t, ds, l)
	l.evictionsDone()
	require.ErrorIs(t, newer.Err(), gxerr.Peer, "the endpoint idle the longest is closed")
	require.NoError(t, older.Err())
}
