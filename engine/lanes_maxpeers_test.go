package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// At Config.MaxPeers, a newcomer must not make room by closing an idle
// lane of a busy TCP endpoint: the lane's failure fails the endpoint it
// belongs to, and that endpoint is busy (its requests went over its first
// connection, the lane carried none). The newcomer is refused instead.
func TestMaxPeersSparesLanesOfBusyEndpoints(t *testing.T) {
	ctx := context.Background()
	owner := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP, MaxPeers: 2})
	peer := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 2})
	other := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 1})
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	b, err := owner.Alloc(4096, Host)
	require.NoError(t, err)
	k, err := b.Export()
	require.NoError(t, err)
	src, err := peer.Alloc(4096, Host)
	require.NoError(t, err)

	busy, err := peer.Dial(ctx, "tcp", l.Addr()) // two connections: the endpoint and its lane
	require.NoError(t, err)
	require.Equal(t, 2, busy.Stats().Lanes)
	require.NoError(t, busy.PutSync(ctx, src.All(), k)) // small: over the first connection only

	_, err = other.Dial(ctx, "tcp", l.Addr())
	require.ErrorIs(t, err, ErrTooManyPeers)
	select {
	case <-busy.Done():
		t.Fatalf("the busy endpoint was closed to make room: %v", busy.Err())
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, busy.PutSync(ctx, src.All(), k))
}
