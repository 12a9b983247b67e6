package memcache

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// hinted returns the region in the first non-empty entry with the tag of
// addr's granule, whether it covers addr or not, else a large region in its
// bucket that covers addr.
func hinted(c *Cache, addr uint64) *Region {
	t := c.hints.Load()
	if t == nil {
		return nil
	}
	b, tag := t.bucket(addr >> c.gshift)
	tags := b.tags.Load()
	var large *Region
	for i := range hintWays {
		switch tags >> (i * tagBits) & tagMask {
		case tag:
			if r := b.r[i].Load(); r != nil {
				return r
			}
		case tagLarge:
			if r := b.r[i].Load(); r != nil && large == nil && r.Contains(addr, 0) {
				large = r
			}
		}
	}
	return large
}

// setHint overwrites what the table holds for addr's granule with r, as a
// reader refilling from an old tree or a tag shared by two granules could
// leave it.
func setHint(c *Cache, addr uint64, r *Region) {
	b, tag := c.hints.Load().bucket(addr >> c.gshift)
	tags := b.tags.Load()
	for i := range hintWays {
		if tags>>(i*tagBits)&tagMask == tag && b.r[i].Load() != nil {
			b.r[i].Store(r)
			return
		}
	}
	b.tags.Store(tags&^tagMask | tag)
	b.r[0].Store(r)
}

// TestHintTable checks that hits are served from the hint table and that
// the table never hands out a region that is not the indexed one covering
// the request, whatever a slot holds.
func TestHintTable(t *testing.T) {
	const base = 0x100000
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, c *Cache, f *fakeReg)
	}{
		{"hit from the table", func(t *testing.T, c *Cache, f *fakeReg) {
			r := mustGet(t, c, base, 100, AccessRead)
			c.Put(r)
			require.Same(t, r, hinted(c, base), "a miss fills the slot")
			r2 := mustGet(t, c, base+8, 8, AccessRead)
			c.Put(r2)
			require.Same(t, r, r2)
			require.Equal(t, uint64(1), c.Stats().HitsFast)
		}},
		{"invalidated region is not handed out", func(t *testing.T, c *Cache, f *fakeReg) {
			held := mustGet(t, c, base, pg, AccessRead)
			c.Invalidate(base, pg)
			require.Nil(t, hinted(c, base), "Invalidate clears the slot")
			// A slot still holding the detached region (a reader refilled
			// it from an old tree, or the region was too large to clear)
			// must be ignored: the region is no longer indexed.
			setHint(c, base, held)
			again := mustGet(t, c, base, pg, AccessRead)
			require.NotSame(t, held, again)
			require.Same(t, again, hinted(c, base), "the slot is repaired")
			c.Put(held)
			c.Put(again)
			require.Equal(t, 1, len(f.live))
		}},
		{"large region's stale slots", func(t *testing.T, c *Cache, f *fakeReg) {
			const n = 4 * clearGranules
			r := mustGet(t, c, base, n*pg, AccessRead)
			c.Put(r)
			for i := uint64(0); i < n; i += 7 {
				x := mustGet(t, c, base+i*pg, 1, AccessRead)
				c.Put(x)
				require.Same(t, r, x)
			}
			c.Invalidate(base, 1)
			require.Nil(t, hinted(c, base+7*pg), "REVIEW FIX: a deregistered large region leaves no hint behind")
			x := mustGet(t, c, base+7*pg, 1, AccessRead)
			require.NotSame(t, r, x, "but not used")
			c.Put(x)
		}},
		{"large region takes one entry per bucket", func(t *testing.T, c *Cache, f *fakeReg) {
			// More granules of one region than the table has entries:
			// a large region's entry serves every granule of its bucket.
			const pages = 1 << 16
			r := mustGet(t, c, base, pages*pg, AccessRead)
			c.Put(r)
			rng := rand.New(rand.NewPCG(5, 6))
			addrs := make([]uint64, 4*c.hints.Load().entries())
			for i := range addrs {
				addrs[i] = base + rng.Uint64N(pages)*pg
				x := mustGet(t, c, addrs[i], 1, AccessRead)
				c.Put(x)
			}
			tb := c.hints.Load()
			served := 0
			for _, a := range addrs {
				if tb.lookup(a>>c.gshift, a, a+1) == r {
					served++
				}
			}
			require.Equal(t, len(addrs), served)
			for i := range tb.buckets {
				n := 0
				for w := range tb.buckets[i].r {
					if tb.buckets[i].r[w].Load() == r {
						n++
					}
				}
				require.LessOrEqual(t, n, 1, "bucket %d", i)
			}
		}},
		{"stale large region does not shadow its successor", func(t *testing.T, c *Cache, f *fakeReg) {
			const pages = 4 * clearGranules
			r := mustGet(t, c, base, pages*pg, AccessRead)
			c.Put(r)
			a := uint64(base + 5*pg)
			c.Put(mustGet(t, c, a, 1, AccessRead))
			c.Invalidate(base, pages*pg) // too large to clear: r stays in the table
			n := mustGet(t, c, a, 1, AccessRead)
			c.Put(n)
			require.NotSame(t, r, n)
			pre := c.Stats()
			for range 3 {
				c.Put(mustGet(t, c, a+8, 8, AccessRead))
			}
			post := c.Stats()
			require.Equal(t, pre.HitsFast+3, post.HitsFast)
			tb := c.hints.Load()
			require.Same(t, n, tb.lookup(a>>c.gshift, a, a+1), "the table serves the new region, not the dead one")
		}},
		{"region without the access", func(t *testing.T, c *Cache, f *fakeReg) {
			r := mustGet(t, c, base, pg, AccessRead)
			w := mustGet(t, c, base, pg, AccessWrite)
			require.NotSame(t, r, w)
			require.Same(t, w, hinted(c, base))
			c.Put(r)
			c.Put(w)
		}},
		{"slot holding a neighbour", func(t *testing.T, c *Cache, f *fakeReg) {
			a := mustGet(t, c, base, pg, AccessRead)
			b := mustGet(t, c, base+2*pg, pg, AccessRead)
			setHint(c, base, b) // as if a torn tag/region pair
			x := mustGet(t, c, base+10, 10, AccessRead)
			require.Same(t, a, x, "the tree finds the right region")
			require.Same(t, a, hinted(c, base))
			for _, r := range []*Region{a, b, x} {
				c.Put(r)
			}
		}},
		{"colliding granules", func(t *testing.T, c *Cache, f *fakeReg) {
			// Four pages whose granules share a bucket are all served
			// from the table (a direct-mapped table holds one).
			pages, rs := registerColliding(t, c, base, 4)
			for i, p := range pages {
				require.Same(t, rs[i], hinted(c, p*pg), "page %d", i)
			}
			pre := c.Stats().HitsFast
			for i, p := range pages {
				x := mustGet(t, c, p*pg+8, 8, AccessRead)
				require.Same(t, rs[i], x)
				c.Put(x)
			}
			require.Equal(t, pre+4, c.Stats().HitsFast)
		}},
		{"full bucket", func(t *testing.T, c *Cache, f *fakeReg) {
			// More colliding granules than ways: each Get still finds
			// its own region, the newest fill is in the table.
			pages, rs := registerColliding(t, c, base, 12)
			for range 3 {
				for i, p := range pages {
					x := mustGet(t, c, p*pg+100, 1, AccessRead)
					require.Same(t, rs[i], x)
					require.Same(t, x, hinted(c, p*pg))
					c.Put(x)
				}
			}
		}},
		{"growth", func(t *testing.T, c *Cache, f *fakeReg) {
			const n = 3000
			rs := make([]*Region, n)
			for i := range rs {
				rs[i] = mustGet(t, c, base+uint64(i)*2*pg, pg, AccessRead)
				c.Put(rs[i])
			}
			require.GreaterOrEqual(t, c.hints.Load().entries(), n, "an entry per indexed granule")
			pre := c.Stats().HitsFast
			for i, r := range rs {
				x := mustGet(t, c, base+uint64(i)*2*pg+100, 100, AccessRead)
				require.Same(t, r, x)
				c.Put(x)
			}
			require.Equal(t, pre+n, c.Stats().HitsFast)
		}},
		{"close drops the table", func(t *testing.T, c *Cache, f *fakeReg) {
			r := mustGet(t, c, base, pg, AccessRead)
			c.Put(r)
			require.NoError(t, c.Close())
			require.Nil(t, c.hints.Load())
			_, err := c.Get(base, pg, AccessRead)
			require.ErrorIs(t, err, ErrClosed)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f, _ := newTestCache(t, Config{Align: pg})
			tc.run(t, c, f)
		})
	}
}

// TestHintSubPageRegions: with an alignment below a page, several regions
// share a granule and so a slot; each is still found.
func TestHintSubPageRegions(t *testing.T) {
	c, _, _ := newTestCache(t, Config{Align: 16})
	a := mustGet(t, c, 0x1000, 16, AccessRead)
	b := mustGet(t, c, 0x1100, 16, AccessRead)
	for range 3 {
		x := mustGet(t, c, 0x1000, 8, AccessRead)
		y := mustGet(t, c, 0x1108, 8, AccessRead)
		require.Same(t, a, x)
		require.Same(t, b, y)
		c.Put(x)
		c.Put(y)
	}
	c.Put(a)
	c.Put(b)
}

// collidingPages returns n page numbers from first on whose granules (a page
// each) share one bucket of t.
func collidingPages(t *hintTable, first uint64, n int) []uint64 {
	want, _ := t.bucket(first)
	pages := []uint64{first}
	for p := first + 2; len(pages) < n; p += 2 { // gaps keep regions apart
		if b, _ := t.bucket(p); b == want {
			pages = append(pages, p)
		}
	}
	return pages
}

// TestHintBucketRace: goroutines hit regions whose granules all share one
// bucket, more of them than it has ways, while another invalidates them, so
// fills, evictions from the bucket, clears and hits race on one cache line.
// Every Get must return a region covering its request; the fake registrar
// fails the test if a held region is deregistered.
func TestHintBucketRace(t *testing.T) {
	c, f, _ := newTestCache(t, Config{Align: pg})
	pages := collidingPages(c.hints.Load(), modelBase/pg, 2*hintWays)
	const workers = 4
	iters := 4000
	if testing.Short() {
		iters = 500
	}
	errs := make(chan error, workers)
	done := make(chan struct{})
	var bg, wg sync.WaitGroup
	bg.Add(1)
	go func() { // invalidator
		defer bg.Done()
		rng := rand.New(rand.NewPCG(7, 0))
		for {
			select {
			case <-done:
				return
			default:
			}
			c.Invalidate(pages[rng.IntN(len(pages))]*pg, pg)
			runtime.Gosched()
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for range iters {
				addr := pages[rng.IntN(len(pages))]*pg + rng.Uint64N(pg-64)
				r, err := c.Get(addr, 64, AccessRead)
				if err != nil {
					errs <- err
					return
				}
				f.hold(r).Add(1)
				if !r.Contains(addr, 64) {
					errs <- fmt.Errorf("Get(%#x) returned [%#x, %#x)", addr, r.Addr(), r.End())
				}
				f.hold(r).Add(-1)
				c.Put(r)
			}
		}()
	}
	wg.Wait()
	close(done)
	bg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, f.check())
	require.NoError(t, checkCache(c, f))
	s := c.Stats()
	require.Equal(t, uint64(workers*iters), s.Gets)
	require.NotZero(t, s.HitsFast)
	require.Zero(t, s.InUseRegions)
}

// TestHintBucketLayout: a bucket is one cache line and its tags fit its tag
// word.
func TestHintBucketLayout(t *testing.T) {
	require.Equal(t, uintptr(64), unsafe.Sizeof(hintBucket{}))
	require.LessOrEqual(t, hintWays*tagBits, 64)
	tb := newHintTable(minHintShift)
	require.Zero(t, uintptr(unsafe.Pointer(&tb.buckets[0]))%64)
}

// registerColliding registers n one-page regions whose granules share the
// hint-table bucket of base's page (Get and Put: registered, unused).
func registerColliding(t *testing.T, c *Cache, base uint64, n int) ([]uint64, []*Region) {
	pages := collidingPages(c.hints.Load(), base/pg, n)
	rs := make([]*Region, len(pages))
	for i, p := range pages {
		rs[i] = mustGet(t, c, p*pg, pg, AccessRead)
		c.Put(rs[i])
	}
	return pages, rs
}
