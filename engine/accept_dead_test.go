package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAcceptSkipsEndedEndpoints: an endpoint whose peer closed it while it
// waited for Accept is not handed out (Accept returned it, and the
// application's first use failed with ErrPeer); Accept waits for a live
// one instead, and the dead one's place (Config.MaxPeers,
// MaxPeersPerSource) is given back: the peer's next Dial gets in and is
// accepted.
func TestAcceptSkipsEndedEndpoints(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			owner := newEngine(t, Config{Devices: DevicesNone, MaxPeers: 1, MaxPeersPerSource: 1})
			user := newEngine(t, Config{Devices: DevicesNone, TCPLanes: 1}) // one connection: within MaxPeers 1
			l := listenLocal(t, owner, network)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang guard only
			defer cancel()
			ep, err := user.Dial(ctx, network, l.Addr())
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(owner.EndpointStats()) == 1 }, 5*time.Second, time.Millisecond)
			require.NoError(t, ep.Close())
			require.Eventually(t, func() bool { return len(owner.EndpointStats()) == 0 }, 5*time.Second, time.Millisecond,
				"the owner's endpoint ends with its peer's Close")

			short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel2()
			got, err := l.Accept(short)
			if err == nil {
				t.Fatalf("Accept returned an endpoint that had ended (its error: %v)", got.Err())
			}
			require.ErrorIs(t, err, ErrTimeout)

			ep2, err := user.Dial(ctx, network, l.Addr())
			require.NoError(t, err, "the ended endpoint's place is given back")
			defer ep2.Close()
			got, err = l.Accept(ctx)
			require.NoError(t, err)
			require.NoError(t, got.Err())
			require.NoError(t, got.Close())
		})
	}
}
