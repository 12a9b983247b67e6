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
// last found there. A bucket is one cache line holding hintWays regions and
// a word of short tags (a few bits of each entry's granule hash), so a
// lookup reads one line, picks the entry by tag without touching any other
// region, and then touches the region, which the hit must do anyway to take
// its reference. Seven ways keep colliding granules apart: the direct-mapped
// table this replaced (a pointer per slot, two slots per region) sent a
// quarter of the random hits over irregularly laid out regions to the tree
// (BenchmarkHitIrregular); and since multi-page regions take an entry per
// page, the table is sized by granules. A region of more than clearGranules
// granules is the exception: it is stored under tagLarge, which every
// lookup in the bucket checks, so it takes one entry per bucket however many
// of its pages are hit (BenchmarkHitLargeRegion).
//
// The table is only a hint: a region found there is used if it covers the
// request with enough access and acquire succeeds, which it does only while
// the region is indexed. Indexed regions never overlap, so an indexed region
// that covers the request is exactly the one the tree would return. A tag
// and its region are two words written one after the other, and two
// granules may share a tag, so a reader may find another granule's region
// under its tag; that, like an empty entry, a granule with no entry, or a
// region that has left the index, falls through to the tree, and a region
// found there is written back. Readers write an entry only when it does not
// already hold that region, so hot lines stay shared in every core's cache.
//
// A hit still takes two dependent cache lines when neither is cached: the
// bucket, then the region, whose state word holds the reference count (Get
// returns the *Region and Put(r) has only r to find the count by, so the
// count cannot live in the table). With the loop of independent hits that
// BenchmarkHit runs, the CPU overlaps them with the next hits' and a random
// hit costs about one miss's latency.
//
// The writer keeps at least one entry per granule of the indexed regions (a
// region counting at most clearGranules), from 1<<minHintShift up to
// 1<<maxHintShift buckets; the table never shrinks. It clears the entries of
// small regions that leave the index. Entries of a large region that left,
// or refilled by a reader that found it in an older tree, stay until the
// region is deregistered: purgeHintsLocked then drops them, so that a dead
// Region (and its value, which may keep caller memory alive) is never
// kept reachable by the table.

const (
	hintWays = 7 // entries per bucket: a tag word and 7 regions, 64 B
	tagBits  = 9 // bits of a tag: hintWays*tagBits <= 64
	tagMask  = 1<<tagBits - 1
	// tagLarge marks an entry of a region of more than clearGranules
	// granules: a lookup checks it whatever its granule's tag, so a large
	// region takes one entry in a bucket, not one per granule (no granule
	// gets this tag).
	tagLarge     = tagMask
	minHintShift = 10 // 1024 buckets (64 KiB: see hintBucket)
	maxHintShift = 17 // 128Ki buckets (8 MiB)
	pageShift    = 12 // a granule is at least 4 KiB
	// clearGranules bounds the entries the writer clears for a region that
	// leaves the index, and how many granules a region counts for sizing.
	clearGranules = 64
)

// hintBucket is one cache line: hintWays regions and, packed in one word,
// their tags, tagBits of their granule's hash taken below the bucket index.
// A region slot that is nil is empty, whatever its tag. A table is at least
// 64 KiB, above the largest small size class, so Go allocates it on its own
// pages without a malloc header and a bucket never straddles two lines
// (smaller objects with pointers start 8 bytes into their slot).
type hintBucket struct {
	tags atomic.Uint64
	r    [hintWays]atomic.Pointer[Region]
}

// hintTable is one version of the table. Its size never changes: growing
// publishes a new table.
type hintTable struct {
	shift   uint         // 64 - log2(len(buckets))
	buckets []hintBucket // len is a power of two
}

// newHintTable returns an empty table of 1<<log2 buckets.
func newHintTable(log2 uint) *hintTable {
	return &hintTable{shift: 64 - log2, buckets: make([]hintBucket, 1<<log2)}
}

// entries returns the number of entries.
func (t *hintTable) entries() int { return len(t.buckets) * hintWays }

// bucket returns the bucket of granule g and g's tag in it (Fibonacci
// hashing: consecutive granules land in distinct, well spread buckets).
func (t *hintTable) bucket(g uint64) (*hintBucket, uint64) {
	h := g * 0x9E3779B97F4A7C15
	tag := h >> (t.shift - tagBits) & tagMask
	if tag == tagLarge {
		tag = 0
	}
	return &t.buckets[h>>t.shift], tag
}

// lookup returns a region the table holds for granule g that covers
// [addr, end), or nil. A tag is a filter, so a tag that matches but belongs
// to another granule costs a look at the wrong region, never a wrong answer.
func (t *hintTable) lookup(g, addr, end uint64) *Region {
	b, tag := t.bucket(g)
	tags := b.tags.Load()
	for i := range hintWays {
		if lt := tags >> (i * tagBits) & tagMask; lt == tag || lt == tagLarge {
			if r := b.r[i].Load(); r != nil && r.start <= addr && end <= r.end {
				return r
			}
		}
	}
	return nil
}

// store makes r the region of granule g, unless an entry with g's tag
// already holds it: in the first entry with g's tag (which did not serve),
// else in an empty one, else in a random one. A large region is stored
// under tagLarge, once per bucket.
func (t *hintTable) store(g uint64, r *Region, large bool) {
	b, tag := t.bucket(g)
	if large {
		tag = tagLarge
	}
	tags := b.tags.Load()
	way, free := -1, -1
	for i := range hintWays {
		old := b.r[i].Load()
		if large && old == r {
			return
		}
		if old != nil && old != r && tags>>(i*tagBits)&tagMask == tagLarge &&
			old.state.Load()&stateIndexed == 0 && b.r[i].CompareAndSwap(old, nil) {
			// A large region that left the index (never cleared, see
			// clearHintsLocked) would be found first by every lookup
			// it covers, only to fail acquire: drop it.
			old = nil
		}
		if !large && tags>>(i*tagBits)&tagMask == tag && old != nil {
			if old == r {
				return
			}
			if way < 0 {
				way = i
			}
		}
		if old == nil && free < 0 {
			free = i
		}
	}
	if way < 0 {
		way = free
	}
	if way < 0 {
		way = int(rand.Uint32() % hintWays)
	}
	// Empty the entry first, so no reader finds r under the old tag's
	// granule or the old region under r's tag (both would only cost a
	// look, but need not).
	b.r[way].Store(nil)
	shift := uint(way * tagBits)
	for {
		old := b.tags.Load()
		if b.tags.CompareAndSwap(old, old&^(tagMask<<shift)|tag<<shift) {
			break
		}
	}
	b.r[way].Store(r)
}

// clear empties the entries of granule g's bucket that hold r.
func (t *hintTable) clear(g uint64, r *Region) {
	b, _ := t.bucket(g)
	for i := range b.r {
		b.r[i].CompareAndSwap(r, nil)
	}
}

// hintShift returns the granule shift for an alignment (a power of two).
func hintShift(align uint64) uint {
	return max(uint(bits.TrailingZeros64(align)), pageShift)
}

// large reports whether r spans more than clearGranules granules.
func (c *Cache) large(r *Region) bool {
	return (r.end-1)>>c.gshift-r.start>>c.gshift >= clearGranules
}

// hintKeys returns how many granules r counts for when sizing the table.
func (c *Cache) hintKeys(r *Region) int {
	return int(min((r.end-1)>>c.gshift-r.start>>c.gshift+1, clearGranules))
}

// hint records r as the region for addr's granule, unless its entry already
// holds it.
func (c *Cache) hint(addr uint64, r *Region) {
	if t := c.hints.Load(); t != nil {
		t.store(addr>>c.gshift, r, c.large(r))
	}
}

// growHintsLocked replaces the table with a larger one when the indexed
// granules have outgrown it, seeding the new table with each region's first
// granule.
func (c *Cache) growHintsLocked() {
	t := c.hints.Load()
	if t == nil || len(t.buckets) >= 1<<maxHintShift || c.granules <= t.entries() {
		return
	}
	nb := (c.granules + hintWays - 1) / hintWays
	nt := newHintTable(min(uint(bits.Len(uint(nb-1))), maxHintShift)) // >= granules entries
	c.root.Load().ascend(0, func(_ uint64, r *Region) bool {
		nt.store(r.start>>c.gshift, r, c.large(r))
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
	if c.large(r) {
		return
	}
	first, last := r.start>>c.gshift, (r.end-1)>>c.gshift
	for g := first; g <= last; g++ {
		t.clear(g, r)
	}
}

// purgeHintsLocked drops every entry of the table that still holds r,
// which is being deregistered. Entries hold the region and so its value,
// which may keep large memory reachable (a host mapping keeps the mapped
// caller memory alive): a dead region must not stay in the table. Nothing stores r any more (stores follow a successful
// acquire, and r has no reference left and is out of the index). A
// small region's granules are cleared again (a reader may have refilled
// one after clearHintsLocked); a large region's entries can be in any
// bucket, so the table is swept (loads only; a CAS only where r is).
func (c *Cache) purgeHintsLocked(r *Region) {
	t := c.hints.Load()
	if t == nil {
		return
	}
	if !c.large(r) {
		c.clearHintsLocked(r)
		return
	}
	for i := range t.buckets {
		b := &t.buckets[i]
		for w := range b.r {
			if b.r[w].Load() == r {
				b.r[w].CompareAndSwap(r, nil)
			}
		}
	}
}
