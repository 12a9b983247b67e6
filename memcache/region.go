package memcache

import (
	"strconv"
	"strings"
	"sync/atomic"
)

// Access is a bitmask of the kinds of access a registration grants. A cached
// region satisfies a request when its access is a superset of the request's.
type Access uint32

// Access bits.
const (
	AccessRead Access = 1 << iota
	AccessWrite
	AccessRemoteRead
	AccessRemoteWrite
)

// String returns the set bits joined by "|", e.g. "read|remote-write".
func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	names := [...]string{"read", "write", "remote-read", "remote-write"}
	var parts []string
	for i, n := range names {
		if a&(1<<i) != 0 {
			parts = append(parts, n)
			a &^= 1 << i
		}
	}
	if a != 0 {
		parts = append(parts, "0x"+strconv.FormatUint(uint64(a), 16))
	}
	return strings.Join(parts, "|")
}

// Region state word layout. Everything a hit changes lives in this one word,
// so a hit is a single compare-and-swap: the caller reference count, the
// CLOCK bit and a hit counter; the index's own reference is stateIndexed.
const (
	stateIndexed uint64 = 1 << 63                           // in the index: fast-path Gets may take references
	stateRecent  uint64 = 1 << 62                           // CLOCK reference bit, set by hits, cleared by the eviction hand
	hitOne       uint64 = 1 << 32                           // one fast-path hit
	stateHits    uint64 = (stateRecent - 1) &^ (hitOne - 1) // fast-path hits not yet moved to Region.hits
	stateRefs    uint64 = hitOne - 1                        // caller references
	stateLive    uint64 = stateIndexed | stateRefs          // zero once the region is dead
)

// Region is one registered address range. It is returned referenced by
// [Cache.Get] and must be handed back with [Cache.Put]; its accessors may be
// called at any time, also after the region has been deregistered.
//
// A region's registration stays valid as long as the caller holds its
// reference, even if the region is invalidated, merged into a larger one or
// evicted meanwhile: it is deregistered only when it is out of the index and
// its last reference is dropped.
type Region struct {
	// state: stateIndexed | stateRecent | hits | caller references. A region
	// is dead (deregistered or about to be) once state&stateLive is 0, and
	// since references are only taken while stateIndexed is set, it stays
	// dead.
	state atomic.Uint64

	start, end uint64
	access     Access
	value      any
	cache      *Cache
	hits       uint64 // fast-path hits moved out of state; guarded by cache.mu
}

// Addr returns the first address of the registered range.
func (r *Region) Addr() uint64 { return r.start }

// Len returns the length of the registered range in bytes.
func (r *Region) Len() uint64 { return r.end - r.start }

// End returns the first address after the registered range.
func (r *Region) End() uint64 { return r.end }

// Access returns the access the range was registered with.
func (r *Region) Access() Access { return r.access }

// Value returns what the [Registrar] returned when it registered the range
// (a memory key, a device address, ...).
func (r *Region) Value() any { return r.value }

// Contains reports whether [addr, addr+length) lies inside the region. A zero
// length asks whether addr itself does.
func (r *Region) Contains(addr, length uint64) bool {
	if length == 0 {
		return addr >= r.start && addr < r.end
	}
	end := addr + length
	return end > addr && addr >= r.start && end <= r.end
}

// acquire takes a caller reference and counts a fast-path hit if the region
// is still indexed. It fails once the region has left the index, so no
// reference is ever handed out on a region that is being or has been
// deregistered. It also fails, sending the caller to the slow path, when the
// hit counter or the reference count is saturated.
func (r *Region) acquire() bool {
	for {
		st := r.state.Load()
		if st&stateIndexed == 0 || st&stateHits == stateHits || st&stateRefs == stateRefs {
			return false
		}
		if r.state.CompareAndSwap(st, (st+1+hitOne)|stateRecent) {
			return true
		}
	}
}

// fastHits returns how many fast-path hits r has served. The caller holds
// the cache's lock.
func (r *Region) fastHits() uint64 { return r.hits + (r.state.Load()&stateHits)/hitOne }
