package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEvictedPeerIsToldWhy: an endpoint the listener closes to make room
// for another peer (Config.MaxPeers) ends at its dialer with ErrPeer
// saying that the listener closed it, and why; it said only "connection
// lost", as for a peer that crashed or a network that failed.
func TestEvictedPeerIsToldWhy(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			owner := newEngine(t, Config{Devices: DevicesNone, MaxPeers: 1, MaxPeersPerSource: 1})
			user := newEngine(t, Config{Devices: DevicesNone, TCPLanes: 1}) // one connection: within MaxPeers 1
			l := listenLocal(t, owner, network)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang guard only
			defer cancel()
			first, err := user.Dial(ctx, network, l.Addr())
			require.NoError(t, err)
			defer first.Close()
			second, err := user.Dial(ctx, network, l.Addr()) // the first made no request: closed to make room
			require.NoError(t, err)
			defer second.Close()
			select {
			case <-first.Done():
			case <-ctx.Done():
				t.Fatal("the first endpoint was not closed to make room")
			}
			err = first.Err()
			require.ErrorIs(t, err, ErrPeer)
			require.ErrorContains(t, err, "peer closed the endpoint")
			require.ErrorContains(t, err, "to make room for another peer")
			require.NoError(t, second.Err())
		})
	}
}
