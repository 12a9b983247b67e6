package etcdmeta

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
)

// TestWatchStartsAtWatchCall: a watch follows the key from the store's
// last read of it when Watch is called. It took that read on its own
// goroutine, later: a Lookup in between (another caller's, of a version
// published meanwhile) moved its start, so the change between the two
// reads was never reported and a watcher holding the first record kept
// it.
func TestWatchStartsAtWatchCall(t *testing.T) {
	srv := etcdtest.New(t)
	pub, obs := open(t, srv, 0), open(t, srv, 0)
	ctx := ctxT(t)
	require.NoError(t, pub.Publish(ctx, record("a", 5, 1)))
	m, err := obs.Lookup(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, uint64(1), m.Version)

	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	obs.watchStarting = func() { <-release }
	rec := newRecorder()
	stop := obs.Watch("a", rec.fn) // the watcher holds version 1
	defer stop()
	require.NoError(t, pub.Publish(ctx, record("a", 5, 2)))
	m, err = obs.Lookup(ctx, "a") // another caller of the store reads version 2
	require.NoError(t, err)
	require.Equal(t, uint64(2), m.Version)
	unblock()

	rec.waitFor(t, limit, "Put of version 2", func(ev meta.Event) bool { return ev.Kind == meta.Put && ev.Meta.Version == 2 })
}
