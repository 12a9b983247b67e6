package agent

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/meta"
)

func (a *Agent) addrsKept() (names, order int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.addrs), len(a.addrOrder)
}

// TestConnectAddrsBounded: a peer reached under a new name each time
// (Connect, as the perf target does for every hello) and gone then left
// its address in the agent for the agent's life before the fix, one
// entry per name. Now the names not cached are kept up to maxAddrs, the
// latest ones, which Peer still reaches again.
func TestConnectAddrsBounded(t *testing.T) {
	ctx := testCtx(t)
	eng := newEngine(t)
	a := newAgent(t, eng, "a", agentOpts{})
	const keep, names = 4, 12
	a.mu.Lock()
	a.maxAddrs = keep
	a.mu.Unlock()
	var last *Agent
	for i := range names {
		b, err := New(ctx, Config{Name: fmt.Sprintf("b%d", i), Engine: eng, TCP: "127.0.0.1:0"})
		require.NoError(t, err)
		_, err = a.Connect(ctx, b.Metadata().TCP)
		require.NoError(t, err)
		if i == names-1 {
			last = b
			t.Cleanup(func() { require.NoError(t, b.Close()) })
			break
		}
		require.NoError(t, b.Close())
		p, err := a.Peer(ctx, b.Metadata().Name)
		if err == nil {
			select { // dropped once its connection ends
			case <-p.Done():
			case <-ctx.Done():
				t.Fatal("peer not dropped")
			}
		}
	}
	n, order := a.addrsKept()
	require.LessOrEqual(t, n, keep, "addresses kept for %d names", names)
	require.Equal(t, n, order)
	// The latest name is reached again from its address once dropped.
	p, err := a.Peer(ctx, last.Metadata().Name)
	require.NoError(t, err)
	p.invalidate(fmt.Errorf("test"))
	p2, err := a.Peer(ctx, last.Metadata().Name)
	require.NoError(t, err)
	require.NotSame(t, p, p2)
	// The oldest is forgotten.
	_, err = a.Peer(ctx, "b0")
	require.ErrorIs(t, err, meta.ErrNotFound)
}
