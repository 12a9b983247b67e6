package agent

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// watching lists the names a has a store watch for.
func watching(a *Agent) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var names []string
	for n := range a.watches {
		names = append(names, n)
	}
	return names
}

// TestEtcdFailedLookupNoWatch: a lookup that fails (no such agent) leaves
// no store watch behind: before, every name ever asked for kept a watch
// (goroutines and an etcd watch stream) until Close, so a caller asking
// for names from its own input grew them without bound. A name found
// later is watched from its lookup on: its republication drops it.
func TestEtcdFailedLookupNoWatch(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{store: openStore(t, srv.Endpoints())})
	for i := range 20 {
		_, err := a.Peer(ctx, fmt.Sprintf("nobody-%d", i))
		require.ErrorIs(t, err, meta.ErrNotFound)
	}
	_, err := a.Peer(ctx, "b")
	require.ErrorIs(t, err, meta.ErrNotFound)
	require.Empty(t, watching(a), "failed lookups leave no watch")

	b := newAgent(t, eb, "b", agentOpts{unix: true, store: openStore(t, srv.Endpoints())})
	kv := alloc(t, eb, 4096, engine.Host)
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, watching(a))
	require.NoError(t, b.Publish("kv", kv.All()))
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Fatal("b republished and a did not drop it")
	}
	require.ErrorIs(t, p.Err(), engine.ErrPeer)
	p2, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	_, err = p2.Section("kv")
	require.NoError(t, err)
}
