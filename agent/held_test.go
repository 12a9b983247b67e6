package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCyclingSendersHeldBounded: a source that opens connections in a
// loop, each sending one notification and closing, while the application
// does not Recv. Before the fix every connection past the source's share
// kept its endpoint and serving goroutine (holding its notification) for
// as long as the application did not Recv: Stats.Inbound grew by one per
// connection. Now the hellos of the source's new connections wait while
// it holds maxHeldClosed such endpoints; nothing sent is dropped.
func TestCyclingSendersHeldBounded(t *testing.T) {
	ctx := testCtx(t)
	eng := newEngine(t)
	a := newAgent(t, eng, "a", agentOpts{unix: true, queue: 2}) // a share of 1
	const keep, senders = 2, 8
	a.maxHeldClosed = keep // (before any connection)
	sent := 0
	for i := range senders {
		b, err := New(ctx, Config{Name: fmt.Sprintf("b%d", i), Engine: eng})
		require.NoError(t, err)
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		if _, err = b.Connect(cctx, a.Metadata().Unix); err == nil {
			require.NoError(t, b.Notify(ctx, "a", []byte{byte(i)}))
			sent++
		}
		cancel()
		require.NoError(t, b.Close())
		// Its end noticed (the first notification is queued, the
		// others held): the next hello then finds the gate as it is.
		for j := 0; j < 1000 && a.heldClosed() < sent-1; j++ {
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The endpoints of the senders that gave up end (bounded wait).
	n := a.Stats().Inbound
	for i := 0; i < 1000 && n > keep; i++ {
		time.Sleep(5 * time.Millisecond)
		n = a.Stats().Inbound
	}
	require.LessOrEqual(t, n, keep, "inbound endpoints kept after %d senders (%d sent)", senders, sent)
	require.Less(t, sent, senders)
	// Every notification sent is delivered (the senders' order is not
	// kept among them); then the held endpoints go.
	want, got := map[byte]bool{}, map[byte]bool{}
	for i := range sent {
		want[byte(i)] = true
		n, err := a.Recv(ctx)
		require.NoError(t, err)
		require.Len(t, n.Msg, 1)
		got[n.Msg[0]] = true
	}
	require.Equal(t, want, got)
	for i := 0; i < 1000 && a.Stats().Inbound > 0; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	require.Zero(t, a.Stats().Inbound)
	// The gate opened: a new sender is answered again.
	b := newAgent(t, eng, "late", agentOpts{})
	_, err := b.Connect(ctx, a.Metadata().Unix)
	require.NoError(t, err)
	require.NoError(t, b.Notify(ctx, "a", []byte("late")))
	n2, err := a.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, "late", string(n2.Msg))
}

// heldClosed sums its sources' endpoints ended with a notification held.
func (a *Agent) heldClosed() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, s := range a.sources {
		s.mu.Lock()
		n += s.held
		s.mu.Unlock()
	}
	return n
}
