package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/engine"
)

// kvPeer is a bare agent (cfg: its name, socket and queue) on an engine
// of its own, connected to the agent at sock, which may not listen yet
// (what names it, log is its stderr, for the failure message). Both are
// closed at the test's end.
func kvPeer(t *testing.T, ctx context.Context, cfg agent.Config, sock, what string, log fmt.Stringer) (*agent.Agent, string) {
	t.Helper()
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	t.Cleanup(func() { eng.Close() })
	cfg.Engine = eng
	a, err := agent.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	var peer string
	require.Eventually(t, func() bool {
		peer, err = a.Connect(ctx, sock)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the %s never listened: %s", what, log.String())
	return a, peer
}
