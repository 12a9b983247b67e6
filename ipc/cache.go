package ipc

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"
)

// PeerID identifies a peer process: its pid and pid namespace (pids of
// different namespaces are not comparable).
type PeerID struct {
	PID   uint32
	PIDNS uint64
	// Instance tells apart peers that share a process (two engines in one
	// process number their allocations independently); 0 if unused.
	Instance uint64
}

// Key names one imported allocation: the peer's AllocID and Generation
// (from the peer's RemoteKey).
type Key struct {
	Peer       PeerID
	AllocID    uint64
	Generation uint64
}

// Importer performs one import for a HandleCache: typically it sends an
// ImportRequest to the peer, receives the fd and maps it (or registers
// it). It returns the value, the bytes it accounts for (for MaxBytes), or
// an error. It runs without the cache's lock, at most once at a time per
// (Peer, AllocID) slot, and must not call back into the cache for k.
// Get has no context: the Importer should bound its own wait.
type Importer[V any] func(k Key) (v V, size uint64, err error)

// Cache limits used when CacheConfig leaves them 0.
const (
	DefaultMaxRegions = 1024
	DefaultMaxBytes   = 64 << 30
)

// CacheConfig configures a HandleCache.
type CacheConfig[V any] struct {
	// MaxRegions and MaxBytes bound the imported values alive (cached or
	// in use). 0 means DefaultMaxRegions / DefaultMaxBytes; MaxRegions < 0
	// and MaxBytes == math.MaxUint64 mean no limit. When an import or a
	// Put leaves the cache over a limit, unreferenced entries are evicted
	// in LRU order. In-use entries are never evicted, so the limits are
	// soft while everything is in use.
	MaxRegions int
	MaxBytes   uint64
	// Release undoes an import (unmap, close, deregister). The cache calls
	// it exactly once per successfully imported value, never while the
	// value is referenced, and never with the cache's lock held. Its
	// errors are logged, counted, and returned by Close for the values
	// Close releases. nil means nothing to release.
	Release func(V) error
	// Logger receives release failures. The zero value discards them.
	Logger zerolog.Logger
}

// HandleCache caches imports of peers' memory on the importer side (the
// IPC handle cache), so that repeated operations on a peer's buffer
// import (request the fd, map it) once. Entries are reference counted:
// Get returns a Handle that stays valid until its Put, whatever happens to
// the entry meanwhile (invalidation, purge, eviction, Close).
//
// Semantics:
//   - Get of a cached (Peer, AllocID, Generation) is a hit: one more
//     reference. Concurrent Gets of a key being imported wait for that one
//     import and share its result (singleflight).
//   - Generations increase each time the exporter reuses an AllocID. A Get
//     with a newer generation than the cached entry drops the stale entry
//     (released at its last Put) and imports afresh; a Get with an older
//     generation fails with ErrStale without touching the cache.
//   - Invalidate (the exporter freed the allocation) and PurgePeer (the
//     peer disconnected or died) remove entries; in-use ones are released
//     at their last Put. An entry removed while it is being imported makes
//     that Get (and its waiters) fail with ErrStale (ErrClosed if Close
//     removed it); the imported value is released at once.
//   - Unreferenced entries are kept, in LRU order, within MaxRegions and
//     MaxBytes: the cache is bounded, unlike UCX's IPC cache whose
//     unbounded growth was reported for years.
//
// A HandleCache is safe for concurrent use. The zero value is not usable:
// call NewHandleCache.
type HandleCache[V any] struct {
	cfg        CacheConfig[V]
	maxRegions int
	maxBytes   uint64

	mu     sync.Mutex
	index  map[slot]*Handle[V]
	lru    Handle[V] // sentinel: lru.next is the least recently used
	closed bool

	regions int
	bytes   uint64
	inUse   int

	hits, misses, importErrors, evictions, invalidations, purges uint64
	replaced, staleRefused, releases, badPuts                    uint64
	releaseErrors                                                atomic.Uint64
}

type slot struct {
	peer  PeerID
	alloc uint64
}

type entryState uint8

const (
	loading entryState = iota
	ready              // holds a value, served to Gets while indexed
	failed             // import failed or the entry was removed while loading: err says why
)

// Handle is a reference to one cached import. It is valid from Get until
// the matching Put; calling its methods after Put is a bug. Every
// successful Get must be matched by exactly one Put.
type Handle[V any] struct {
	c    *HandleCache[V]
	key  Key
	val  V
	size uint64

	gone atomic.Bool // left the index (invalidated, purged, replaced): readable without c.mu

	// guarded by c.mu
	refs       int
	state      entryState
	hasValue   bool // the import succeeded: Release is owed
	released   bool
	indexed    bool
	err        error         // state failed
	removedErr error         // why the entry left the index
	done       chan struct{} // closed when loading ends
	prev, next *Handle[V]    // LRU links, when in the list
}

// Value returns the imported value.
func (h *Handle[V]) Value() V { return h.val }

// Gone reports whether the entry left the cache's index (the exporter
// freed the buffer, or the peer went away): a holder should stop using it.
func (h *Handle[V]) Gone() bool { return h.gone.Load() }

// Key returns the key the value was imported for.
func (h *Handle[V]) Key() Key { return h.key }

// Size returns the bytes the import accounts for.
func (h *Handle[V]) Size() uint64 { return h.size }

// ImportError wraps an Importer's failure.
type ImportError struct {
	Key Key
	Err error
}

func (e *ImportError) Error() string {
	return fmt.Sprintf("ipc: import of peer %d/%d alloc %d generation %d: %v",
		e.Key.Peer.PID, e.Key.Peer.PIDNS, e.Key.AllocID, e.Key.Generation, e.Err)
}

// Unwrap returns the Importer's error.
func (e *ImportError) Unwrap() error { return e.Err }

// NewHandleCache returns an empty cache.
func NewHandleCache[V any](cfg CacheConfig[V]) *HandleCache[V] {
	c := &HandleCache[V]{cfg: cfg, maxRegions: cfg.MaxRegions, maxBytes: cfg.MaxBytes, index: map[slot]*Handle[V]{}}
	if c.maxRegions == 0 {
		c.maxRegions = DefaultMaxRegions
	}
	if c.maxBytes == 0 {
		c.maxBytes = DefaultMaxBytes
	}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// Get returns a reference to the value imported for k, importing it with
// imp on a miss (see HandleCache for the rules). Errors: ErrClosed,
// ErrStale, ErrInvalid (nil imp), or an *ImportError.
func (c *HandleCache[V]) Get(k Key, imp Importer[V]) (*Handle[V], error) {
	if imp == nil {
		return nil, fmt.Errorf("%w: nil Importer", ErrInvalid)
	}
	s := slot{k.Peer, k.AllocID}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	var victims []*Handle[V]
	if h := c.index[s]; h != nil {
		switch {
		case h.key.Generation == k.Generation:
			c.hits++
			c.acquireLocked(h)
			if h.state == ready {
				c.mu.Unlock()
				return h, nil
			}
			c.mu.Unlock()
			<-h.done
			c.mu.Lock()
			if h.state == ready {
				c.mu.Unlock()
				return h, nil
			}
			err := h.err
			victims = c.unrefLocked(h, victims)
			c.mu.Unlock()
			c.release(victims)
			return nil, err
		case h.key.Generation > k.Generation:
			c.staleRefused++
			cached := h.key.Generation
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: generation %d of alloc %d requested, %d is current", ErrStale, k.Generation, k.AllocID, cached)
		default:
			c.replaced++
			victims = c.removeLocked(h, fmt.Errorf("%w: generation %d replaced by %d", ErrStale, h.key.Generation, k.Generation), victims)
		}
	}
	h := &Handle[V]{c: c, key: k, indexed: true, done: make(chan struct{})}
	c.index[s] = h
	c.misses++
	c.acquireLocked(h)
	c.mu.Unlock()
	c.release(victims)

	finished := false
	defer func() {
		if !finished { // the Importer panicked: fail the entry, let the panic go on
			var zero V
			_ = c.finishImport(h, zero, 0, errors.New("ipc: Importer panicked"))
		}
	}()
	v, size, err := imp(k)
	finished = true
	if err := c.finishImport(h, v, size, err); err != nil {
		return nil, err
	}
	return h, nil
}

// finishImport records the outcome of h's import and wakes its waiters.
func (c *HandleCache[V]) finishImport(h *Handle[V], v V, size uint64, err error) error {
	var victims []*Handle[V]
	c.mu.Lock()
	defer func() {
		c.mu.Unlock()
		c.release(victims)
	}()
	defer close(h.done)
	if err != nil {
		c.importErrors++
		victims = c.removeLocked(h, nil, victims)
		h.state, h.err = failed, &ImportError{Key: h.key, Err: err}
		victims = c.unrefLocked(h, victims)
		return h.err
	}
	h.val, h.size, h.hasValue = v, size, true
	c.regions++
	c.bytes += size
	if !h.indexed {
		h.state, h.err = failed, h.removedErr
		victims = c.unrefLocked(h, victims)
		return h.err
	}
	h.state = ready
	victims = c.evictLocked(victims)
	return nil
}

// acquireLocked takes a reference.
func (c *HandleCache[V]) acquireLocked(h *Handle[V]) {
	if h.refs == 0 {
		c.inUse++
		if h.prev != nil {
			c.lruRemove(h)
		}
	}
	h.refs++
}

// unrefLocked drops a reference; at zero the entry goes to the LRU list
// (indexed) or is retired (not indexed). Retired entries are appended to
// victims for release.
func (c *HandleCache[V]) unrefLocked(h *Handle[V], victims []*Handle[V]) []*Handle[V] {
	if h.refs <= 0 {
		c.badPuts++
		return victims
	}
	h.refs--
	if h.refs > 0 {
		return victims
	}
	c.inUse--
	switch {
	case !h.hasValue:
	case !h.indexed:
		victims = c.retireLocked(h, victims)
	case h.state == ready:
		c.lruPush(h)
	}
	return victims
}

// removeLocked takes h out of the index (why: the error a Get still
// importing it gets); unreferenced values are retired.
func (c *HandleCache[V]) removeLocked(h *Handle[V], why error, victims []*Handle[V]) []*Handle[V] {
	if !h.indexed {
		return victims
	}
	delete(c.index, slot{h.key.Peer, h.key.AllocID})
	h.indexed, h.removedErr = false, why
	h.gone.Store(true)
	if h.prev != nil {
		c.lruRemove(h)
	}
	if h.refs == 0 && h.hasValue {
		victims = c.retireLocked(h, victims)
	}
	return victims
}

func (c *HandleCache[V]) retireLocked(h *Handle[V], victims []*Handle[V]) []*Handle[V] {
	if h.released {
		panic("ipc: HandleCache: value retired twice")
	}
	h.released = true
	c.regions--
	c.bytes -= h.size
	c.releases++
	return append(victims, h)
}

// evictLocked evicts LRU entries while the cache is over a limit.
func (c *HandleCache[V]) evictLocked(victims []*Handle[V]) []*Handle[V] {
	for (c.maxRegions >= 0 && c.regions > c.maxRegions) || c.bytes > c.maxBytes {
		h := c.lru.next
		if h == &c.lru {
			break // everything left is in use
		}
		c.evictions++
		victims = c.removeLocked(h, ErrStale, victims)
	}
	return victims
}

func (c *HandleCache[V]) lruPush(h *Handle[V]) {
	h.prev, h.next = c.lru.prev, &c.lru
	c.lru.prev.next = h
	c.lru.prev = h
}

func (c *HandleCache[V]) lruRemove(h *Handle[V]) {
	h.prev.next = h.next
	h.next.prev = h.prev
	h.prev, h.next = nil, nil
}

// release calls Release for retired values, without the lock.
func (c *HandleCache[V]) release(victims []*Handle[V]) error {
	var errs []error
	for _, h := range victims {
		if c.cfg.Release == nil {
			continue
		}
		if err := c.cfg.Release(h.val); err != nil {
			c.releaseErrors.Add(1)
			c.cfg.Logger.Warn().Err(err).Uint32("peer_pid", h.key.Peer.PID).Uint64("alloc", h.key.AllocID).
				Uint64("generation", h.key.Generation).Msg("ipc: handle cache: release failed")
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Put drops the reference Get returned. When the last reference of an
// entry that left the cache goes, its value is released.
func (c *HandleCache[V]) Put(h *Handle[V]) {
	if h == nil {
		return
	}
	if h.c != c {
		c.mu.Lock()
		c.badPuts++
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	victims := c.unrefLocked(h, nil)
	if h.prev != nil { // back in the LRU list: the limits may now be enforceable
		victims = c.evictLocked(victims)
	}
	c.mu.Unlock()
	c.release(victims)
}

// Invalidate removes the entry for (peer, allocID) if its generation is
// at most gen: the exporter freed that allocation (wire.Invalidate).
func (c *HandleCache[V]) Invalidate(peer PeerID, allocID, gen uint64) {
	c.mu.Lock()
	var victims []*Handle[V]
	if h := c.index[slot{peer, allocID}]; h != nil && h.key.Generation <= gen {
		c.invalidations++
		victims = c.removeLocked(h, fmt.Errorf("%w: alloc %d generation %d invalidated", ErrStale, allocID, h.key.Generation), nil)
	}
	c.mu.Unlock()
	c.release(victims)
}

// PurgePeer removes every entry of peer (it disconnected or died).
func (c *HandleCache[V]) PurgePeer(peer PeerID) {
	c.mu.Lock()
	var victims []*Handle[V]
	for s, h := range c.index {
		if s.peer == peer {
			c.purges++
			victims = c.removeLocked(h, fmt.Errorf("%w: peer %d purged", ErrStale, peer.PID), victims)
		}
	}
	c.mu.Unlock()
	c.release(victims)
}

// Close removes every entry and releases the unreferenced ones; values
// still in use are released at their last Put. Get fails with ErrClosed
// afterwards. Close returns the Release errors of the values it released;
// later calls return nil.
func (c *HandleCache[V]) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	var victims []*Handle[V]
	for _, h := range c.index {
		victims = c.removeLocked(h, ErrClosed, victims)
	}
	c.mu.Unlock()
	return c.release(victims)
}

// CacheStats is a snapshot of a HandleCache's counters: cumulative ones
// first, then the current state.
type CacheStats struct {
	Hits          uint64 // Gets served from the cache, including waits on an import in progress
	Misses        uint64 // Gets that started an import
	ImportErrors  uint64 // imports that failed
	Evictions     uint64 // entries evicted to honour MaxRegions/MaxBytes
	Invalidations uint64 // entries removed by Invalidate
	Purges        uint64 // entries removed by PurgePeer
	Replaced      uint64 // entries dropped because a newer generation was asked for
	StaleRefused  uint64 // Gets refused: older generation than the cached one
	Releases      uint64 // values released (or being released)
	ReleaseErrors uint64 // Release calls that failed
	BadPuts       uint64 // Puts ignored: no reference left, or another cache's handle

	Regions int    // imported values alive (cached or in use)
	Bytes   uint64 // bytes they account for
	InUse   int    // entries with at least one reference
	Cached  int    // entries in the index (importing, in use or idle)
}

// Stats returns a snapshot of the counters.
func (c *HandleCache[V]) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{
		Hits: c.hits, Misses: c.misses, ImportErrors: c.importErrors, Evictions: c.evictions,
		Invalidations: c.invalidations, Purges: c.purges, Replaced: c.replaced, StaleRefused: c.staleRefused,
		Releases: c.releases, ReleaseErrors: c.releaseErrors.Load(), BadPuts: c.badPuts,
		Regions: c.regions, Bytes: c.bytes, InUse: c.inUse, Cached: len(c.index),
	}
}
