package agent

import (
	"fmt"
	"testing"
	"time"

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

// TestEtcdGoneStopsWatch: once a peer's record left the store and no
// peer of the name is cached, the name's store watch stops: before, it
// ran until Close, so an agent whose peers come and go under new names
// (restarted pods) kept a watch per name it ever reached. The name found
// again is watched again.
func TestEtcdGoneStopsWatch(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{store: openStore(t, srv.Endpoints())})
	dir := sockDir(t)
	b1, err := New(ctx, Config{Name: "b", Engine: eb, Unix: dir + "/b1.sock", Store: openStore(t, srv.Endpoints())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b1.Close() })
	p1, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, watching(a))
	require.NoError(t, b1.Close())
	select {
	case <-p1.Done():
	case <-ctx.Done():
		t.Fatal("b left the store and a did not drop it")
	}
	require.Eventually(t, func() bool { return len(watching(a)) == 0 }, 10*time.Second, 10*time.Millisecond,
		"the watch of a name gone from the store, with no peer cached, stops")

	b2 := newAgent(t, eb, "b", agentOpts{unix: true, dir: dir, store: openStore(t, srv.Endpoints())})
	p2, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, b2.Incarnation(), p2.Incarnation())
	require.Equal(t, []string{"b"}, watching(a))
	kv := alloc(t, eb, 4096, engine.Host)
	require.NoError(t, b2.Publish("kv", kv.All()))
	select {
	case <-p2.Done():
	case <-ctx.Done():
		t.Fatal("b republished and a did not drop it")
	}
	require.ErrorIs(t, p2.Err(), engine.ErrPeer)
}

// watchHookStore is a store whose Watch runs started (if set) after the
// store's Watch began and before it returns: the window in which the
// agent starts a name's watch. Events reach fn as the store sends them;
// gone gets each Gone once fn has handled it.
type watchHookStore struct {
	meta.Store
	started func(name string)
	gone    chan string
}

func (s *watchHookStore) Watch(name string, fn func(meta.Event)) func() {
	stop := s.Store.Watch(name, func(ev meta.Event) {
		fn(ev)
		if ev.Kind == meta.Gone {
			select {
			case s.gone <- ev.Name:
			default:
			}
		}
	})
	if s.started != nil {
		s.started(name)
	}
	return stop
}

// TestEtcdGoneWhileWatchStartsStopsWatch: a Gone that arrives while the
// name's watch is being started (the lookup that found the name has not
// returned) stops the watch once the lookup ends, as one after would
// (TestEtcdGoneStopsWatch): before, the Gone found the watch not yet
// recorded (or the name still resolving) and left it running until
// Close, one watch per name gone in that window.
func TestEtcdGoneWhileWatchStartsStopsWatch(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	hs := &watchHookStore{Store: openStore(t, srv.Endpoints()), gone: make(chan string, 1)}
	a := newAgent(t, ea, "a", agentOpts{store: hs})
	b, err := New(ctx, Config{Name: "b", Engine: eb, Unix: sockDir(t) + "/b.sock", Store: openStore(t, srv.Endpoints())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	hs.started = func(string) {
		// b leaves the store while a's watch of it starts; the Gone is
		// handled before the watch is recorded.
		require.NoError(t, b.Close())
		select {
		case <-hs.gone:
		case <-ctx.Done():
			t.Error("no Gone for b")
		}
	}
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	select {
	case <-p.Done():
	default:
		t.Fatal("b's Gone did not drop it")
	}
	require.Empty(t, watching(a), "the watch of a name gone while its watch started stops with the lookup")
}
