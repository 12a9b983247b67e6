package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNotifyFloodingSenderHeldAtShare: a sender that floods an agent which
// does not Recv holds at most its share of the notification queue (half
// of it while it is the only sender with notifications queued), so that
// another sender's notification still goes in behind its share, not
// behind a whole queue of the flooder's. Before, the flooder filled the
// queue (FIFO, 8 here) and the other's notification waited for all of
// them. Nothing is dropped: the flooder is held (its endpoint not read)
// and its notifications come in order once taken.
func TestNotifyFloodingSenderHeldAtShare(t *testing.T) {
	const queue, flood = 8, 8
	ctx := testCtx(t)
	r := newAgent(t, newEngine(t), "r", agentOpts{unix: true, queue: queue})
	flooder := newAgent(t, newEngine(t), "flooder", agentOpts{})
	other := newAgent(t, newEngine(t), "other", agentOpts{})
	_, err := flooder.Connect(ctx, r.Metadata().Unix)
	require.NoError(t, err)
	sent := make(chan error, 1)
	go notifyCount(ctx, flooder, "r", flood, sent)
	require.Eventually(t, func() bool { return r.Stats().NotifyQueued >= queue/2 }, time.Minute, time.Millisecond)

	_, err = other.Connect(ctx, r.Metadata().Unix)
	require.NoError(t, err)
	require.NoError(t, other.Notify(ctx, "r", []byte("other")))
	require.Eventually(t, func() bool { return r.Stats().NotifyQueued > queue/2 }, time.Minute, time.Millisecond)
	for i := range queue/2 + 1 {
		n, err := r.Recv(ctx)
		require.NoError(t, err)
		if i < queue/2 {
			require.Equal(t, "flooder", n.From)
			continue
		}
		require.Equal(t, "other", n.From, "the other sender's notification comes after the flooder's share")
	}
	for i := queue / 2; i < flood; i++ { // the flooder's others, in order
		n, err := r.Recv(ctx)
		require.NoError(t, err)
		require.Equal(t, "flooder", n.From)
		require.Equal(t, string(rune('0'+i)), string(n.Msg))
	}
	require.NoError(t, <-sent)
	require.Zero(t, r.Stats().NotifyQueued)
}
