package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestNotifyFloodingSenderHeldAtShare: a sender that floods an agent which
// does not Recv holds at most its share of the notification queue (half
// of it while it is the only sender with notifications queued), so that
// another sender's notification (of another source: over TCP, see
// tcpSender) still goes in behind its share, not behind a whole queue of
// the flooder's. Before, the flooder filled the queue (FIFO, 8 here) and
// the other's notification waited for all of them. Nothing is dropped:
// the flooder is held (its endpoint not read) and its notifications come
// in order once taken.
func TestNotifyFloodingSenderHeldAtShare(t *testing.T) {
	const queue, flood = 8, 8
	ctx := testCtx(t)
	r := newAgent(t, newEngine(t), "r", agentOpts{unix: true, tcp: true, queue: queue})
	flooder := newAgent(t, newEngine(t), "flooder", agentOpts{})
	_, err := flooder.Connect(ctx, r.Metadata().Unix)
	require.NoError(t, err)
	sent := make(chan error, 1)
	go notifyCount(ctx, flooder, "r", flood, sent)
	require.Eventually(t, func() bool { return r.Stats().NotifyQueued >= queue/2 }, time.Minute, time.Millisecond)

	require.NoError(t, tcpSender(t, r, "other").Send(ctx, encodeNotify([]byte("other"))))
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

// TestNotifyShareIsPerSource: the share of the notification queue is the
// sending source's (a unix peer's pid, a TCP peer's address), not each
// connection's: one process opening several connections (three agents
// of other names here, over unix) holds at most the one share of half
// the queue between them, so a notification of another source (over TCP
// here) goes in behind that half. Before, each connection had a share of
// its own: k connections held k/(k+1) of the queue (all of it, here) and
// the other source's notification waited behind them all.
func TestNotifyShareIsPerSource(t *testing.T) {
	const queue, flooders = 8, 3
	ctx := testCtx(t)
	r := newAgent(t, newEngine(t), "r", agentOpts{unix: true, tcp: true, queue: queue})
	sent := make(chan error, flooders)
	for i := range flooders {
		f := newAgent(t, newEngine(t), fmt.Sprintf("flooder%d", i), agentOpts{})
		_, err := f.Connect(ctx, r.Metadata().Unix)
		require.NoError(t, err)
		go notifyCount(ctx, f, "r", queue, sent)
	}
	for range flooders { // every flooder's notifications sent (the window holds them)
		require.NoError(t, <-sent)
	}
	require.Eventually(t, func() bool { return r.Stats().NotifyQueued >= queue/2 }, time.Minute, time.Millisecond)

	require.NoError(t, tcpSender(t, r, "other").Send(ctx, encodeNotify([]byte("other"))))
	require.Eventually(t, func() bool { return r.Stats().NotifyQueued > queue/2 }, time.Minute, time.Millisecond)

	next := map[string]int{}
	for i := range flooders*queue + 1 {
		n, err := r.Recv(ctx)
		require.NoError(t, err)
		if n.From == "other" {
			require.LessOrEqual(t, i, queue/2, "the other source's notification comes after half the queue at most")
			continue
		}
		require.Equal(t, fmt.Sprint(next[n.From]), string(n.Msg), "%s's notifications in order", n.From)
		next[n.From]++
	}
	for i := range flooders {
		require.Equal(t, queue, next[fmt.Sprintf("flooder%d", i)])
	}
	require.Zero(t, r.Stats().NotifyQueued)
}

// tcpSender is a sender named name of another source than this process
// (an agent here reaches r over its unix socket, whose source is this
// process): an endpoint of an engine of its own to r over TCP (source
// 127.0.0.1) that said hello, for the test to send notifications on.
func tcpSender(t *testing.T, r *Agent, name string) *engine.Endpoint {
	t.Helper()
	ctx := testCtx(t)
	ep, err := newEngine(t).Dial(ctx, "tcp", r.Metadata().TCP)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ep.Close() })
	require.NoError(t, ep.Send(ctx, encodeHello(name, 1, 0, 0, false)))
	_, err = ep.Recv(ctx) // r's hello
	require.NoError(t, err)
	return ep
}
