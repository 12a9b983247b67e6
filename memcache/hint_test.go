package memcache

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// hinted returns the region in the hint slot of addr's granule.
func hinted(c *Cache, addr uint64) *Region {
	t := c.hints.Load()
	if t == nil {
		return nil
	}
	return t.slot(addr >> c.gshift).Load()
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
			c.hints.Load().slot(base >> c.gshift).Store(held)
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
			require.Same(t, r, hinted(c, base+7*pg), "too large to clear")
			x := mustGet(t, c, base+7*pg, 1, AccessRead)
			require.NotSame(t, r, x, "but not used")
			c.Put(x)
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
			c.hints.Load().slot(base >> c.gshift).Store(b) // as if the granules collided
			x := mustGet(t, c, base+10, 10, AccessRead)
			require.Same(t, a, x, "the tree finds the right region")
			require.Same(t, a, hinted(c, base))
			for _, r := range []*Region{a, b, x} {
				c.Put(r)
			}
		}},
		{"growth", func(t *testing.T, c *Cache, f *fakeReg) {
			const n = 3000
			rs := make([]*Region, n)
			for i := range rs {
				rs[i] = mustGet(t, c, base+uint64(i)*2*pg, pg, AccessRead)
				c.Put(rs[i])
			}
			require.GreaterOrEqual(t, len(c.hints.Load().slots), 2*n)
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
