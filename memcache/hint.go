package memcache

import (
	"math/bits"
	"sync/atomic"
)

// This file holds the hint table, the first thing a Get consults.
//
// A hit through the B+tree walks three levels of nodes, and at 100k regions
// the leaf's lines and the region's line are all cache misses, taken one after
// the other. The hint table is a direct-mapped array, indexed by a hash of the
// granule (Config.Align, at least a page) that holds the requested address,
// of the region last found for that granule. Its slot's address depends on
// the address alone, so a hit costs one load of the slot and one access to
// the region, which the hit must touch anyway to take its reference.
//
// The table is only a hint: a region found there is used if it covers the
// request with enough access and acquire succeeds, which it does only while
// the region is indexed. Indexed regions never overlap, so an indexed region
// that covers the request is exactly the one the tree would return. Anything
// else (an empty slot, a slot taken by another granule, a region that has
// left the index) falls through to the tree, and a region found there is
// written back to the slot. Readers write a slot only when it holds another
// region, so hot slots stay shared in every core's cache.
//
// The writer keeps the table sized to at least twice the indexed regions
// (from 1<<minHintShift up to 1<<maxHintShift slots; it never shrinks) and
// clears the slots of small regions that leave the index. Slots of a large
// region that left, or refilled by a reader that found it in an older tree,
// are overwritten by later fills or dropped when the table grows or the cache
// closes; until then they keep the dead Region reachable, which costs memory
// but not correctness.

const (
	minHintShift = 10 // 1024 slots
	maxHintShift = 20 // 1M slots (8 MiB)
	pageShift    = 12 // a granule is at least 4 KiB
	// clearGranules bounds the slots the writer clears for a region that
	// leaves the index.
	clearGranules = 64
)

// hintTable is one version of the table. Its size never changes: growing
// publishes a new table.
type hintTable struct {
	shift uint                     // 64 - log2(len(slots))
	slots []atomic.Pointer[Region] // len is a power of two
}

func newHintTable(log2 uint) *hintTable {
	return &hintTable{shift: 64 - log2, slots: make([]atomic.Pointer[Region], 1<<log2)}
}

// slot returns the slot of granule g (Fibonacci hashing: consecutive
// granules land in distinct, well spread slots).
func (t *hintTable) slot(g uint64) *atomic.Pointer[Region] {
	return &t.slots[(g*0x9E3779B97F4A7C15)>>t.shift]
}

// hintShift returns the granule shift for an alignment (a power of two).
func hintShift(align uint64) uint {
	return max(uint(bits.TrailingZeros64(align)), pageShift)
}

// hint records r as the region for addr's granule, unless the slot already
// holds it.
func (c *Cache) hint(addr uint64, r *Region) {
	if t := c.hints.Load(); t != nil {
		if s := t.slot(addr >> c.gshift); s.Load() != r {
			s.Store(r)
		}
	}
}

// growHintsLocked replaces the table with one twice as large when the index
// has outgrown it, seeding the new table with each region's first granule.
func (c *Cache) growHintsLocked() {
	t := c.hints.Load()
	if t == nil || uint(len(t.slots)) >= 1<<maxHintShift || 2*c.indexed <= len(t.slots) {
		return
	}
	nt := newHintTable(min(uint(bits.Len(uint(2*c.indexed-1))), maxHintShift)) // >= 2*indexed slots
	c.root.Load().ascend(0, func(_ uint64, r *Region) bool {
		nt.slot(r.start >> c.gshift).Store(r)
		return true
	})
	c.hints.Store(nt)
}

// clearHintsLocked empties the slots that may hold r, which has left the
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
		t.slot(g).CompareAndSwap(r, nil)
	}
}
