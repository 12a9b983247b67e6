package agent

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/ctrlchan"
)

// TestRepublishStuckPeer: peers connected to an agent that take none of
// its messages (their windows full of its invalidations) do not hold back
// the invalidation of the others when it republishes: an honest peer
// drops the previous record at once, while the Publish still waits for the
// stuck ones (InvalidateWait, an hour here). Two rounds of stuckPeers
// stuck peers, so that the honest one is never the first served by
// chance.
func TestRepublishStuckPeer(t *testing.T) {
	const stuckPeers = 16
	for round := range 2 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			ctx := testCtx(t)
			ea, eb, em := newEngine(t), newEngine(t), newEngine(t)
			a, err := New(ctx, Config{Name: "a", Engine: ea, Unix: filepath.Join(sockDir(t), "a.sock"), InvalidateWait: time.Hour})
			require.NoError(t, err)
			published := make(chan error, 1)
			t.Cleanup(func() {
				require.NoError(t, a.Close())
				<-published // a.Close ended its wait for the stuck peers
			})
			for range stuckPeers {
				ep, err := em.Dial(ctx, "unix", a.Metadata().Unix)
				require.NoError(t, err)
				t.Cleanup(func() { ep.Close() })
			}
			require.Eventually(t, func() bool { return a.Stats().Inbound == stuckPeers }, 10*time.Second, time.Millisecond)
			// Fill the stuck peers' windows: one invalidation each per
			// Publish, none taken.
			kv := alloc(t, ea, (ctrlchan.MsgWindow+1)*4096, engine.Host)
			for i := range ctrlchan.MsgWindow {
				require.NoError(t, a.Publish(fmt.Sprint("s", i), kv.Slice(i*4096, 4096)))
			}
			b := newAgent(t, eb, "b", agentOpts{})
			_, err = b.Connect(ctx, a.Metadata().Unix)
			require.NoError(t, err)
			p, err := b.Peer(ctx, "a")
			require.NoError(t, err)
			go func() { published <- a.Publish("last", kv.Slice(ctrlchan.MsgWindow*4096, 4096)) }()
			select {
			case <-p.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("b was not told that a republished: the stuck peers held its invalidation back")
			}
			require.ErrorIs(t, p.Err(), engine.ErrPeer)
			select {
			case err := <-published:
				t.Fatalf("Publish returned (%v) while the stuck peers' windows are full", err)
			default:
			}
		})
	}
}

// TestWithdrawIgnoringPeers: peers that take the invalidation but never
// close their connection are closed by Withdraw once InvalidateWait has
// passed, every one of them: Withdraw returns. Before, the wait's timer
// fired once, for the first such peer, and Withdraw then waited for the
// second until the agent closed.
func TestWithdrawIgnoringPeers(t *testing.T) {
	ctx := testCtx(t)
	ea, em := newEngine(t), newEngine(t)
	a, err := New(ctx, Config{Name: "a", Engine: ea, Unix: filepath.Join(sockDir(t), "a.sock"), InvalidateWait: 100 * time.Millisecond})
	require.NoError(t, err)
	withdrawn := make(chan error, 1)
	t.Cleanup(func() {
		require.NoError(t, a.Close())
		<-withdrawn
	})
	kv := alloc(t, ea, 4096, engine.Host)
	require.NoError(t, a.Publish("kv", kv.All()))
	const ignoring = 3
	for range ignoring {
		ep, err := em.Dial(ctx, "unix", a.Metadata().Unix)
		require.NoError(t, err)
		t.Cleanup(func() { ep.Close() })
	}
	require.Eventually(t, func() bool { return a.Stats().Inbound == ignoring }, 10*time.Second, time.Millisecond)
	go func() { withdrawn <- a.Withdraw("kv") }()
	select {
	case err := <-withdrawn:
		withdrawn <- err // for the cleanup
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Withdraw still waits for peers that ignore its invalidation")
	}
	require.Eventually(t, func() bool { return a.Stats().Inbound == 0 }, 10*time.Second, time.Millisecond)
}
