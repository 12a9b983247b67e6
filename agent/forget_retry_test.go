package agent

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// dropHold is an agent's log writer that, at the first "peer dropped"
// line (written by invalidate once the peer is out of the cache), signals
// held and waits for release: the caller that dropped the peer held there.
type dropHold struct {
	once          sync.Once
	held, release chan struct{}
}

func (w *dropHold) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("peer dropped")) {
		w.once.Do(func() {
			w.held <- struct{}{}
			<-w.release
		})
	}
	return len(b), nil
}

// TestForgetBeforeRetry: a Write or Notify whose cached peer proved stale
// when dialed (it answered as another incarnation) retries with a fresh
// lookup; Forget of the name run between the drop and that retry makes it
// fail with ErrForgotten and cache nothing. Before, the retry looked the
// name up in the store and cached the forgotten peer again.
func TestForgetBeforeRetry(t *testing.T) {
	tests := []struct {
		name string
		op   func(ctx context.Context, a *Agent, local engine.Slice) error
	}{
		{"Write", func(ctx context.Context, a *Agent, local engine.Slice) error {
			return a.Write(ctx, "m", []Desc{{Local: local, Section: "s"}}).Wait(ctx)
		}},
		{"Notify", func(ctx context.Context, a *Agent, _ engine.Slice) error {
			return a.Notify(ctx, "m", []byte("n"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			ea, em := newEngine(t), newEngine(t)
			l, err := em.Listen("unix", sockDir(t)+"/m.sock")
			require.NoError(t, err)
			defer l.Close()
			srv := etcdtest.New(t)
			rbuf := alloc(t, em, 4096, engine.Host)
			key, err := rbuf.Export()
			require.NoError(t, err)
			ms := openStore(t, srv.Endpoints())
			defer ms.Close()
			require.NoError(t, ms.Publish(ctx, meta.Metadata{Name: "m", Incarnation: 7, Version: 1, Unix: l.Addr(),
				Sections: []meta.Section{{Name: "s", Len: 4096, Location: engine.Host.String(), Key: key.Bytes()}}}))
			w := &dropHold{held: make(chan struct{}), release: make(chan struct{})}
			a, err := New(ctx, Config{Name: "a", Engine: ea, Store: openStore(t, srv.Endpoints()),
				Logger: zerolog.New(w).Level(zerolog.DebugLevel)})
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Close()) }()
			local := alloc(t, ea, 4096, engine.Host).All()
			_, err = a.Peer(ctx, "m") // cached from the store, not dialed yet
			require.NoError(t, err)
			// m answers as incarnation 8: the cached peer is stale.
			peerDone := scriptedPeer(ctx, l, [][]byte{encodeHello("m", 8, 0, 1, false)}, nil)
			lookups := a.Stats().StoreLookups
			result := make(chan error, 1)
			go func() { result <- tt.op(ctx, a, local) }()
			<-w.held // dropped, not retried yet
			require.NoError(t, a.Forget("m"))
			close(w.release)
			err = <-result
			require.ErrorIs(t, err, ErrForgotten)
			require.ErrorIs(t, err, engine.ErrPeer)
			require.False(t, cached(a, "m"), "the peer forgotten came back")
			require.Empty(t, watching(a), "its watch came back")
			require.Equal(t, lookups, a.Stats().StoreLookups, "looked up again")
			require.NoError(t, <-peerDone)
		})
	}
}
