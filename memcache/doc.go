// Package memcache caches memory registrations and memory types by address
// range.
//
// # Registration cache
//
// Registering memory with a device is expensive: pinning host pages and
// mapping them into the Gaudi MMU, exporting device memory as a DMA-BUF,
// registering an InfiniBand memory region. A [Cache] makes each address range
// registered once and hands out reference-counted [Region]s covering the
// ranges callers ask for. What registration means is up to the pluggable
// [Registrar]; the cache only deals in uint64 address ranges (host or device
// virtual addresses) and access bits.
//
// The design follows UCX's registration cache (non-overlapping index,
// merge on insert, the index holding its own reference, LRU only when
// limited, remembered failures) and fixes the problems its users reported:
//
//   - a region is deregistered exactly once, when it is out of the index and
//     its last reference is dropped, never while referenced: invalidated,
//     merged and evicted regions stay valid for their holders;
//   - when a merged range fails to register (because the merge swallowed
//     memory that cannot be registered), the request is retried alone;
//   - MaxRegions and MaxBytes bound the registrations for pin-limited
//     platforms;
//   - failed ranges are remembered for a while, so a bad range does not
//     cause a retry storm.
//
// Hits are lock-free: the index is a copy-on-write B+tree whose root is
// published through an atomic pointer, and a hit takes its reference with a
// compare-and-swap that fails once the region has left the index. In front
// of the tree, a 7-way set-associative hint table keyed by the address's
// page (or Config.Align granule) remembers the region last found there, so
// that a typical hit reads one cache line of the table and the region itself
// instead of walking the tree; a hint is used only if its region is still
// indexed and covers the request, so a stale hint costs a tree walk, never a
// wrong answer. Misses,
// merges, evictions and invalidations are serialised by a per-cache mutex,
// which is also held while the Registrar runs. Eviction uses CLOCK: a hit sets
// a bit in the word it updates anyway, and the eviction hand sweeps the index
// in address order, so hits never take a lock to maintain LRU order.
//
// # Memory lifetime
//
// C libraries such as UCX hook the allocator (munmap, brk, cudaFree, ...) to
// learn when registered memory goes away. Go cannot hook its allocator or
// the kernel's, so the cache cannot notice that memory was freed or
// remapped. Memory a caller registers through the cache must therefore stay
// allocated and mapped until the caller has called [Cache.Invalidate] for it
// (or closed the cache) and put back every region covering it; freeing it
// earlier leaves a registration pointing at pages that may be reused. Memory
// that gxfer allocates itself (host buffers, device buffers) is always
// invalidated by the library when it is freed. Go heap memory should not be
// registered at all: the garbage collector may free or move it.
//
// # Memory-type cache
//
// A [TypeCache] maps address ranges to the kind of memory behind them
// ([MemHost], [MemGaudi]), the device index and an owner, so that code moving
// data can choose a path from a bare address. Lookups are lock-free and only
// succeed when one known range fully contains the queried one.
package memcache
