package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestConnectTCPPeerOnNodeDropped: a peer Connected at any address is
// dropped when it dies (its connection ends: Peer.Done), before any use.
// Before the fix a peer on this node Connected at its TCP address was
// cached with no connection (the TCP one closed, its socket to be dialed
// on first use): nothing told the agent it died, and it stayed cached,
// its Done open, until used.
func TestConnectTCPPeerOnNodeDropped(t *testing.T) {
	tests := []struct {
		name string
		addr func(b *Agent) string
	}{
		{"unix", func(b *Agent) string { return b.Metadata().Unix }},
		{"tcp, peer on this node", func(b *Agent) string { return b.Metadata().TCP }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			ea, eb := newEngine(t), newEngine(t)
			a := newAgent(t, ea, "a", agentOpts{})
			b, err := New(ctx, Config{Name: "b", Engine: eb, Unix: sockDir(t) + "/b.sock", TCP: "127.0.0.1:0"})
			require.NoError(t, err)
			_, err = a.Connect(ctx, tt.addr(b))
			require.NoError(t, err)
			p, err := a.Peer(ctx, "b")
			require.NoError(t, err)
			require.NoError(t, b.Close())
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // bounds the test only
			defer cancel()
			select {
			case <-p.Done():
			case <-wctx.Done():
				t.Fatal("the peer died and is still cached")
			}
			require.ErrorIs(t, p.Err(), engine.ErrPeer)
		})
	}
}
