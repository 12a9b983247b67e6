package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/ctrlchan"
)

// TestTCPGetsAfterCancelNotRefused: Gets sent right after the caller
// cancelled as many large ones are served, not refused. The requester
// counts a cancelled Get out at once, while the owner still winds it
// down; the owner refused the new ones ("too many requests in progress",
// ErrPeer), although a caller within the limit is held back, never
// refused. The owner now keeps them in its backlog (ctrlchan.Serve).
func TestTCPGetsAfterCancelNotRefused(t *testing.T) {
	const big, small = 4 << 20, 4096
	user, owner, ep := tcpPair(t, 1)
	src, err := owner.Alloc(big, Host)
	require.NoError(t, err)
	key, err := src.Export()
	require.NoError(t, err)
	sink, err := user.Alloc(big, Host)
	require.NoError(t, err)
	dst, err := user.Alloc(ctrlchan.MaxServing*small, Host)
	require.NoError(t, err)
	bg := context.Background()
	for round := range 3 {
		ctx, cancel := context.WithCancel(bg)
		large := make([]*Future, ctrlchan.MaxServing)
		for i := range large {
			large[i] = ep.Get(ctx, sink.All(), key)
		}
		cancel()
		for _, f := range large {
			<-f.Done()
		}
		fs := make([]*Future, ctrlchan.MaxServing)
		for i := range fs {
			fs[i] = ep.Get(bg, dst.Slice(i*small, small), key.Slice(0, small))
		}
		for i, f := range fs {
			require.NoError(t, f.Wait(bg), "round %d, Get %d", round, i)
		}
	}
}
