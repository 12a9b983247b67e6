package tcp

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ender records what ctxWatch tells it.
type ender struct {
	n    ctxNode
	told atomic.Int32
	ctx  atomic.Value // the context it was told about
	ch   chan struct{}
}

func newEnder() *ender { return &ender{ch: make(chan struct{}, 1)} }

func (e *ender) ctxEnded(ctx context.Context) {
	e.ctx.Store(ctx)
	e.told.Add(1)
	e.ch <- struct{}{}
}

func (e *ender) waitTold(t *testing.T) {
	t.Helper()
	select {
	case <-e.ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not told that its context ended")
	}
}

type ctxKey struct{}

// TestCtxWatchShared: requests watching one context (or contexts that end
// with it: a WithValue child) share one registration, and each is told
// with its own context when it ends; the entry is gone then.
func TestCtxWatchShared(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		child bool
	}{{"one", 1, false}, {"many", 8, false}, {"value children", 8, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var w ctxWatch
			ctx, cancel := context.WithCancel(context.Background())
			es := make([]*ender, tc.n)
			ctxs := make([]context.Context, tc.n)
			for i := range es {
				es[i], ctxs[i] = newEnder(), ctx
				if tc.child {
					ctxs[i] = context.WithValue(ctx, ctxKey{}, i)
				}
				require.True(t, w.add(ctxs[i], &es[i].n, es[i]))
			}
			require.EqualValues(t, 1, w.registered.Load())
			require.Equal(t, 1, w.watched())
			cancel()
			for i, e := range es {
				e.waitTold(t)
				require.Same(t, ctxs[i], e.ctx.Load())
				w.remove(&e.n) // the request ends after: nothing to take out
			}
			require.Equal(t, 0, w.watched())
			for _, e := range es {
				require.EqualValues(t, 1, e.told.Load())
			}
		})
	}
}

// TestCtxWatchIdle: a context whose requests all ended stays registered
// for the next request with it; another one going idle stops it; a
// stopped context's end tells nobody.
func TestCtxWatchIdle(t *testing.T) {
	var w ctxWatch
	a, cancelA := context.WithCancel(context.Background())
	b, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	e1 := newEnder()
	require.True(t, w.add(a, &e1.n, e1))
	w.remove(&e1.n)
	require.Equal(t, 1, w.watched(), "kept for the next request")
	e2 := newEnder()
	require.True(t, w.add(a, &e2.n, e2))
	require.EqualValues(t, 1, w.registered.Load(), "the kept registration served it")
	w.remove(&e2.n)
	e3 := newEnder()
	require.True(t, w.add(b, &e3.n, e3))
	w.remove(&e3.n)
	require.EqualValues(t, 2, w.registered.Load())
	require.Equal(t, 1, w.watched(), "one idle context at most")
	require.EqualValues(t, 1, w.stopped.Load(), "a's registration stopped before a ends")
	cancelA()
	time.Sleep(20 * time.Millisecond)
	for _, e := range []*ender{e1, e2, e3} {
		require.Zero(t, e.told.Load())
	}
	w.close()
	require.Equal(t, 0, w.watched())
	require.EqualValues(t, 2, w.stopped.Load(), "close stopped b's")
	require.Zero(t, w.fired.Load())
}

// TestCtxWatchIdlePolicy: an entry is kept idle for a caller that reuses
// its context, and stopped at once when keeping it would hold another
// request's context (a WithValue child left it last) or when the caller
// ends each request's context after it (idle entries fired).
func TestCtxWatchIdlePolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run makes the requests; it returns the registrations expected
		// stopped and fired by the end, and idle entries left.
		run func(t *testing.T, w *ctxWatch) (stopped, fired int64, idle int)
	}{
		{"shared context", func(t *testing.T, w *ctxWatch) (int64, int64, int) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			for range 20 {
				e := newEnder()
				require.True(t, w.add(ctx, &e.n, e))
				w.remove(&e.n)
			}
			require.EqualValues(t, 1, w.registered.Load())
			return 0, 0, 1
		}},
		{"value child left last", func(t *testing.T, w *ctxWatch) (int64, int64, int) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			e1, e2 := newEnder(), newEnder()
			require.True(t, w.add(ctx, &e1.n, e1))
			require.True(t, w.add(context.WithValue(ctx, ctxKey{}, 1), &e2.n, e2))
			w.remove(&e1.n)
			w.remove(&e2.n)
			return 1, 0, 0
		}},
		{"context per request", func(t *testing.T, w *ctxWatch) (int64, int64, int) {
			for i := range 20 {
				ctx, cancel := context.WithCancel(context.Background())
				e := newEnder()
				require.True(t, w.add(ctx, &e.n, e))
				w.remove(&e.n)
				cancel()
				if i == 0 {
					// Kept idle, the first fires: wait for it, so that
					// the next ones see it counted.
					require.Eventually(t, func() bool { return w.fired.Load() == 1 }, 5*time.Second, time.Millisecond)
				}
			}
			require.EqualValues(t, 20, w.registered.Load())
			return 19, 1, 0
		}},
		{"one context after one per request", func(t *testing.T, w *ctxWatch) (int64, int64, int) {
			// An idle entry fired: none is kept...
			ctx0, cancel0 := context.WithCancel(context.Background())
			e := newEnder()
			require.True(t, w.add(ctx0, &e.n, e))
			w.remove(&e.n)
			cancel0()
			require.Eventually(t, func() bool { return w.fired.Load() == 1 }, 5*time.Second, time.Millisecond)
			// ...until the probe keeps one, which the caller's one
			// context reuses: then they all are.
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			for range 4 * probeEvery {
				e := newEnder()
				require.True(t, w.add(ctx, &e.n, e))
				w.remove(&e.n)
			}
			require.EqualValues(t, 1+probeEvery, w.registered.Load(), "registered until the probe, then kept")
			return probeEvery - 1, 1, 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w ctxWatch
			stopped, fired, idle := tc.run(t, &w)
			require.Equal(t, idle, w.watched(), "idle entries left")
			require.Equal(t, stopped, w.stopped.Load(), "registrations stopped")
			require.Eventually(t, func() bool { return w.fired.Load() == fired }, 5*time.Second, time.Millisecond)
			w.close()
			require.Equal(t, w.registered.Load(), w.stopped.Load()+w.fired.Load(), "every registration stopped or fired")
		})
	}
}

// TestCtxWatchEnded: a request that watches a context that already ended
// is told at once.
func TestCtxWatchEnded(t *testing.T) {
	var w ctxWatch
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := newEnder()
	require.True(t, w.add(ctx, &e.n, e))
	e.waitTold(t)
	require.Equal(t, 0, w.watched())
}

// TestCtxWatchClose: the path's end stops every registration: a context
// ending after it tells nobody, requests still in a list leave it, and
// nothing is watched any more.
func TestCtxWatchClose(t *testing.T) {
	var w ctxWatch
	ctx, cancel := context.WithCancel(context.Background())
	e1, e2 := newEnder(), newEnder()
	require.True(t, w.add(ctx, &e1.n, e1))
	w.close()
	require.EqualValues(t, 1, w.stopped.Load())
	cancel()
	time.Sleep(20 * time.Millisecond)
	require.Zero(t, e1.told.Load())
	w.remove(&e1.n)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	require.False(t, w.add(ctx2, &e2.n, e2), "nothing is watched after close")
	require.Equal(t, 0, w.watched())
}

// TestCtxWatchRace: requests of several contexts joining and leaving at
// once, each context ending after its last request joined: one that left
// before is never told, every other one is, and every entry is gone.
func TestCtxWatchRace(t *testing.T) {
	var w ctxWatch
	const ctxs, each = 4, 200
	var wg sync.WaitGroup
	var all [][]*ender
	var gone [][]atomic.Bool
	for range ctxs {
		ctx, cancel := context.WithCancel(context.Background())
		es := make([]*ender, each)
		removed := make([]atomic.Bool, each)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range es {
				es[i] = newEnder()
				if !w.add(ctx, &es[i].n, es[i]) {
					t.Error("add refused")
					return
				}
				if i%2 == 0 {
					w.remove(&es[i].n)
					removed[i].Store(true)
				}
			}
			cancel()
		}()
		all = append(all, es)
		gone = append(gone, removed)
		go func() {
			defer wg.Done()
			<-ctx.Done()
			for i, e := range es {
				if removed[i].Load() {
					continue // checked once every fire returned
				}
				select {
				case <-e.ch:
				case <-time.After(5 * time.Second):
					t.Errorf("request %d not told", i)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool { return w.watched() == 0 }, 5*time.Second, time.Millisecond)
	w.close()
	// Every registration was stopped or has fired, and each fire has
	// returned: a request wrongly told has been told by now.
	require.Eventually(t, func() bool { return w.registered.Load() == w.stopped.Load()+w.fired.Load() }, 5*time.Second, time.Millisecond)
	for c, es := range all {
		for i, e := range es {
			if gone[c][i].Load() {
				require.Zero(t, e.told.Load(), "context %d: request %d told after it left", c, i)
			}
		}
	}
}
