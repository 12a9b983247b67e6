package memcache

import (
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
)

// This file holds the hint table, the first thing a Get consults.
//
// A hit through the B+tree walks three levels of nodes, and at 100k regions
// the leaf's lines and the region's line are all cache misses, taken one after
// the other. The hint table is a hash table of granules (Config.Align, at
// least a page): for a granule that holds a requested address, the region
// last found there. A bucket is one cache line of hintWays entries, each a
// granule number (the tag) and a region, so a lookup reads one line, finds
// the entry tagged with its granule without touching any other region, and
// then touches the region, which the hit must do anyway to take its
// reference. Four ways keep colliding granules apart: a direct-mapped table
// at the same load sent a quarter of the random hits over irregularly laid
// out regions to the tree (BenchmarkHitIrregular).
//
// The table is only a hint: a region found there is used if it covers the
// request with enough access and acquire succeeds, which it does only while
// the region is indexed. Indexed regions never overlap, so an indexed region
// that covers the request is exactly the one the tree would return. A tag
// and its region are two words written one after the other, so a reader may
// see a tag with another granule's region; that, like an empty entry, a
// granule with no entry, or a region that has left the index, falls through
// to the tree, and a region found there is written back. Readers write an
// entry only when it does not already hold that region, so hot lines stay
// shared in every core's cache.
//
// A hit still takes two dependent cache lines when neither is cached: the
// bucket, then the region, whose state word holds the reference count (Get
// returns the *Region and Put(r) has only r to find the count by, so the
// count cannot live in the table).
//
// The writer keeps the table at no less than twice as many entries as the
// indexed regions have granules (a region counting at most clearGranules),
// from 1<<minHintShift up to 1<<maxHintShift entries; it never shrinks. It
// clears the entries of small regions that leave the index. Entries of a
// large region that left, or refilled by a reader that found it in an older
// tree, are overwritten by later fills or dropped when the table grows or
// the cache closes; until then they keep the dead Region reachable, which
// costs memory but not correctness.

const (
	hintWays     = 4  // entries per bucket: 4 x 16 B, one cache line
	minHintShift = 10 // 1024 entries (16 KiB)
	maxHintShift = 19 // 512Ki entries (8 MiB)
	pageShift    = 12 // a granule is at least 4 KiB
	// clearGranules bounds the entries the writer clears for a region that
	// leaves the index, and how many granules a region counts for sizing.
	clearGranules = 64
)

// hintEntry maps a granule (tag) to a region. An entry whose region is nil
// is empty, whatever its tag.
type hintEntry struct {
	tag atomic.Uint64
	r   atomic.Pointer[Region]
}

// hintBucket is one cache line of entries (Go allocates power-of-two sizes
// of 64 B and more on their own alignment, so buckets never straddle lines).
type hintBucket [hintWays]hintEntry

// hintTable is one version of the table. Its size never changes: growing
// publishes a new table.
type hintTable struct {
	shift   uint         // 64 - log2(len(buckets))
	buckets []hintBucket // len is a power of two
}

// newHintTable returns an empty table of 1<<log2 entries.
func newHintTable(log2 uint) *hintTable {
	nb := uint(1) << log2 / hintWays
	return &hintTable{shift: 64 - uint(bits.Len(nb-1)), buckets: make([]hintBucket, nb)}
}

// entries returns the number of entries.
func (t *hintTable) entries() int { return len(t.buckets) * hintWays }

// bucket returns the bucket of granule g (Fibonacci hashing: consecutive
// granules land in distinct, well spread buckets).
func (t *hintTable) bucket(g uint64) *hintBucket {
	return &t.buckets[(g*0x9E3779B97F4A7C15)>>t.shift]
}

// lookup returns the region of the entry tagged g, or nil.
func (t *hintTable) lookup(g uint64) *Region {
	b := t.bucket(g)
	for i := range b {
		if b[i].tag.Load() == g {
			if r := b[i].r.Load(); r != nil {
				return r
			}
		}
	}
	return nil
}

// store makes r the region of granule g: in the entry already tagged g if
// there is one (writing only if it holds another region), else in an empty
// entry, else in a random one.
func (t *hintTable) store(g uint64, r *Region) {
	b := t.bucket(g)
	free := -1
	for i := range b {
		e := &b[i]
		old := e.r.Load()
		if e.tag.Load() == g && old != nil {
			if old != r {
				e.r.Store(r)
			}
			return
		}
		if old == nil && free < 0 {
			free = i
		}
	}
	if free < 0 {
		free = int(rand.Uint32() % hintWays)
	}
	e := &b[free]
	e.r.Store(nil) // readers of the old tag see an empty entry, not r under it
	e.tag.Store(g)
	e.r.Store(r)
}

// clear empties granule g's entries that hold r.
func (t *hintTable) clear(g uint64, r *Region) {
	b := t.bucket(g)
	for i := range b {
		b[i].r.CompareAndSwap(r, nil)
	}
}

// hintShift returns the granule shift for an alignment (a power of two).
func hintShift(align uint64) uint {
	return max(uint(bits.TrailingZeros64(align)), pageShift)
}

// hintKeys returns how many granules r counts for when sizing the table.
func (c *Cache) hintKeys(r *Region) int {
	return int(min((r.end-1)>>c.gshift-r.start>>c.gshift+1, clearGranules))
}

// hint records r as the region for addr's granule, unless its entry already
// holds it.
func (c *Cache) hint(addr uint64, r *Region) {
	if t := c.hints.Load(); t != nil {
		t.store(addr>>c.gshift, r)
	}
}

// growHintsLocked replaces the table with a larger one when the indexed
// granules have outgrown it, seeding the new table with each region's first
// granule.
func (c *Cache) growHintsLocked() {
	t := c.hints.Load()
	if t == nil || t.entries() >= 1<<maxHintShift || 2*c.granules <= t.entries() {
		return
	}
	nt := newHintTable(min(uint(bits.Len(uint(2*c.granules-1))), maxHintShift)) // >= 2*granules entries
	c.root.Load().ascend(0, func(_ uint64, r *Region) bool {
		nt.store(r.start>>c.gshift, r)
		return true
	})
	c.hints.Store(nt)
}

// clearHintsLocked empties the entries that may hold r, which has left the
// index, if r spans at most clearGranules granules.
func (c *Cache) clearHintsLocked(r *Region) {
	t := c.hints.Load()
	if t == nil {
		return
	}
	first, last := r.start>>c.gshift, (r.end-1)>>c.gshift
	if last-first >= clearGranules {
		return
	}
	for g := first; g <= last; g++ {
		t.clear(g, r)
	}
}
