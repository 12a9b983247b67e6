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

// TestConnectTCPNoUnixFromTCP: Connect at the TCP address of a peer on
// this node reaches it at the unix socket its record names; with
// Config.NoUnixFromTCP (an agent that Connects where untrusted peers say)
// that record is not trusted with the node's sockets: the peer is kept at
// TCP, its cached record naming no socket, and a redial stays on TCP.
func TestConnectTCPNoUnixFromTCP(t *testing.T) {
	tests := []struct {
		name   string
		noUnix bool
		want   engine.TransportKind
	}{
		{"default", false, engine.TransportIPC},
		{"NoUnixFromTCP", true, engine.TransportTCP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			ea := newEngine(t)
			a, err := New(ctx, Config{Name: "a", Engine: ea, NoUnixFromTCP: tt.noUnix})
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Close()) }()
			b := newAgent(t, newEngine(t), "b", agentOpts{unix: true, tcp: true})
			_, err = a.Connect(ctx, b.Metadata().TCP)
			require.NoError(t, err)
			p, err := a.Peer(ctx, "b")
			require.NoError(t, err)
			k, ok := p.Transport()
			require.True(t, ok)
			require.Equal(t, tt.want, k)
			if tt.noUnix {
				require.Empty(t, p.Metadata().Unix)
			}
		})
	}
}
