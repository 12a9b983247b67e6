package ipc

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The handle cache under concurrency and at scale.

// TestHandleCacheConcurrent: many goroutines Get and Put while others
// invalidate and purge. The fake importer fails the test (afterwards) if a
// value is released twice or while held; at the end everything imported is
// released exactly once and the limits hold once all is put back.
func TestHandleCacheConcurrent(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxRegions int
		maxBytes   uint64
	}{
		{"limited", 4, 0},
		{"bytes", 0, 1000},
		{"roomy", 64, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeImporter()
			f.fail = func(k Key) error {
				if k.AllocID == 5 && k.Generation == 2 {
					return errors.New("refused")
				}
				return nil
			}
			c := newTestCache(f, tc.maxRegions, tc.maxBytes)
			const workers = 8
			iters := 2000
			if testing.Short() {
				iters = 300
			}
			var (
				wg, bg     sync.WaitGroup
				violations atomic.Int64
				done       = make(chan struct{})
			)
			peers := []PeerID{p1, p2, {PID: 300, PIDNS: 2}}
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					var held []*Handle[*fakeVal]
					for range iters {
						if len(held) < 3 && rng.IntN(3) != 0 {
							k := key(peers[rng.IntN(len(peers))], 1+rng.Uint64N(6), 1+rng.Uint64N(3))
							h, err := c.Get(k, f.imp)
							if err != nil {
								continue
							}
							v := h.Value()
							v.holders.Add(1)
							if v.released.Load() || v.key != k {
								violations.Add(1)
							}
							held = append(held, h)
							continue
						}
						if len(held) > 0 {
							i := rng.IntN(len(held))
							h := held[i]
							if h.Value().released.Load() {
								violations.Add(1)
							}
							h.Value().holders.Add(-1)
							c.Put(h)
							held = slices.Delete(held, i, i+1)
						}
					}
					for _, h := range held {
						h.Value().holders.Add(-1)
						c.Put(h)
					}
				}()
			}
			bg.Add(2)
			go func() { // the exporter frees allocations
				defer bg.Done()
				rng := rand.New(rand.NewPCG(100, 1))
				for {
					select {
					case <-done:
						return
					default:
					}
					c.Invalidate(peers[rng.IntN(len(peers))], 1+rng.Uint64N(6), 1+rng.Uint64N(3))
					runtime.Gosched()
				}
			}()
			go func() { // peers come and go; and someone watches stats
				defer bg.Done()
				rng := rand.New(rand.NewPCG(200, 1))
				for i := 0; ; i++ {
					select {
					case <-done:
						return
					default:
					}
					if i%50 == 0 {
						c.PurgePeer(peers[rng.IntN(len(peers))])
					}
					_ = c.Stats()
					runtime.Gosched()
				}
			}()
			wg.Wait()
			close(done)
			bg.Wait()

			require.Zero(t, violations.Load())
			f.check(t)
			st := c.Stats()
			require.Equal(t, 0, st.InUse)
			maxR := tc.maxRegions
			if maxR == 0 {
				maxR = DefaultMaxRegions
			}
			require.LessOrEqual(t, st.Regions, maxR, "regions over the limit with nothing in use")
			if tc.maxBytes != 0 {
				require.LessOrEqual(t, st.Bytes, tc.maxBytes)
			}
			require.Equal(t, st.Regions, st.Cached)
			require.NoError(t, c.Close())
			st = c.Stats()
			require.Equal(t, 0, st.Regions)
			require.Zero(t, st.Bytes)
			f.mu.Lock()
			defer f.mu.Unlock()
			require.Equal(t, f.imports, f.releases, "every import released exactly once")
			require.Empty(t, f.live)
			require.Equal(t, uint64(f.releases), st.Releases)
			require.NotZero(t, st.Hits)
		})
	}
}

// TestHandleCacheHitWithoutLock: a hit and the Put that follows it take
// no lock (the lock is held here while they run), and neither does a Put
// of an entry that stays cached; a miss does.
func TestHandleCacheHitWithoutLock(t *testing.T) {
	f := newFakeImporter()
	c := newTestCache(f, 0, 0)
	k := key(p1, 1, 1)
	h, err := c.Get(k, f.imp)
	require.NoError(t, err)
	c.Put(h)

	c.mu.Lock()
	done := make(chan error, 1)
	go func() {
		h, err := c.Get(k, f.imp)
		if err == nil {
			c.Put(h)
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute): // a hang guard, not a performance check
		t.Fatal("a hit waited for the cache's lock")
	}
	miss := make(chan error, 1)
	go func() {
		h, err := c.Get(key(p1, 2, 1), f.imp)
		if err == nil {
			c.Put(h)
		}
		miss <- err
	}()
	for range 1000 {
		runtime.Gosched() // let the miss run into the lock
	}
	require.Empty(t, miss, "a miss takes the lock")
	c.mu.Unlock()
	require.NoError(t, <-miss)
	st := c.Stats()
	require.Equal(t, uint64(1), st.Hits)
	require.Equal(t, uint64(2), st.Misses)
	require.Equal(t, 0, st.InUse)
	require.NoError(t, c.Close())
	f.check(t)
}

// TestHandleCacheManyKeys: more entries than the hit path has shards, so
// that shards hold several: hits, generation changes, invalidations and
// purges find and withdraw the right ones.
func TestHandleCacheManyKeys(t *testing.T) {
	f := newFakeImporter()
	c := newTestCache(f, -1, math.MaxUint64)
	const n = 3 * readyShards
	ids := map[Key]int{}
	get := func(k Key, want string) {
		t.Helper()
		misses := c.Stats().Misses
		h, err := c.Get(k, f.imp)
		require.NoError(t, err, k)
		got := hit
		if c.Stats().Misses > misses {
			got = miss
			ids[k] = h.Value().id
		}
		require.Equal(t, want, got, k)
		require.Equal(t, ids[k], h.Value().id, k)
		require.Equal(t, k, h.Value().key)
		c.Put(h)
	}
	for _, p := range []PeerID{p1, p2} {
		for a := range uint64(n) {
			get(key(p, a, 1), miss)
		}
	}
	for _, p := range []PeerID{p1, p2} {
		for a := range uint64(n) {
			get(key(p, a, 1), hit)
		}
	}
	// Newer generations of the even allocations, invalidation of every
	// third one of p1, and p2 purged.
	for a := uint64(0); a < n; a += 2 {
		get(key(p1, a, 2), miss)
	}
	for a := uint64(0); a < n; a += 3 {
		c.Invalidate(p1, a, 2)
	}
	c.PurgePeer(p2)
	for a := range uint64(n) {
		gen := uint64(1)
		if a%2 == 0 {
			gen = 2
		}
		want := hit
		if a%3 == 0 {
			want = miss
		}
		get(key(p1, a, gen), want)
		if gen == 2 {
			_, err := c.Get(key(p1, a, 1), f.imp)
			require.ErrorIs(t, err, ErrStale)
		}
	}
	for a := range uint64(n) {
		get(key(p2, a, 1), miss)
	}
	st := c.Stats()
	require.Equal(t, 2*n, st.Cached)
	require.Equal(t, 0, st.InUse)
	require.NoError(t, c.Close())
	for i := range c.ready {
		if l := c.ready[i].Load(); l != nil {
			require.Empty(t, *l, "shard %d: nothing is left to hit after Close", i)
		}
	}
	f.mu.Lock()
	require.Equal(t, f.imports, f.releases)
	f.mu.Unlock()
	f.check(t)
}

// TestHandleCacheConcurrentCloseWaits: a Close that finds another Close
// under way returns only once that one has released every unreferenced
// value, so a caller may check for leaks as soon as its Close returns.
func TestHandleCacheConcurrentCloseWaits(t *testing.T) {
	entered, unblock := make(chan struct{}), make(chan struct{})
	var released atomic.Bool
	c := NewHandleCache(CacheConfig[int]{Release: func(int) error {
		close(entered)
		<-unblock
		released.Store(true)
		return nil
	}})
	h, err := c.Get(key(p1, 1, 1), func(Key) (int, uint64, error) { return 7, 1, nil })
	require.NoError(t, err)
	c.Put(h)
	unblockOnce := sync.OnceFunc(func() { close(unblock) })
	defer unblockOnce() // on failure too: no goroutine left blocked

	first, second := make(chan error, 1), make(chan bool, 1)
	go func() { first <- c.Close() }()
	<-entered // the first Close is releasing the value
	go func() {
		_ = c.Close()
		second <- released.Load()
	}()
	select {
	case done := <-second:
		require.True(t, done, "the second Close returned while the first was still releasing")
		unblockOnce()
	case <-time.After(50 * time.Millisecond): // not returned yet: let the release end
		unblockOnce()
		select {
		case done := <-second:
			require.True(t, done, "the second Close returned before the release ended")
		case <-time.After(20 * time.Second):
			require.FailNow(t, "the second Close did not return")
		}
	}
	select {
	case err := <-first:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		require.FailNow(t, "the first Close did not return")
	}
	require.NoError(t, c.Close(), "a later Close returns nil")
}
