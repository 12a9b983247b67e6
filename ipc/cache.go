package ipc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Conn tells apart connections to one peer (a peer that closes and
	// redials at once): what one connection imported is its own, so its
	// teardown (PurgePeer) leaves the next connection's imports alone. 0 if
	// unused.
	Conn uint64
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
// A HandleCache is safe for concurrent use. A hit takes no lock: Get
// finds ready entries in an atomically published, copy-on-write snapshot
// (sharded) and takes its reference with a compare-and-swap on the
// entry's count, and Put drops it with another (the lock is taken only to
// release an entry that left the cache, or to evict once an over-limit
// cache has something evictable). The LRU order is a stamp per entry,
// taken at the Put that leaves it unreferenced; eviction takes the
// oldest unreferenced entries first. The zero value is not usable: call
// NewHandleCache.
type HandleCache[V any] struct {
	cfg        CacheConfig[V]
	maxRegions int
	maxBytes   uint64

	// ready mirrors the index's ready entries for Get's lock-free hit
	// path: shards of immutable slices, replaced (copied) with mu held
	// when an entry becomes ready or leaves the index.
	ready [readyShards]atomic.Pointer[[]*Handle[V]]
	tick  atomic.Uint64 // LRU stamps (Handle.lastPut)
	over  atomic.Bool   // the last eviction left the cache over a limit: every entry was in use

	mu      sync.Mutex
	index   map[slot]*Handle[V]
	byPeer  map[PeerID]map[uint64]*Handle[V] // index's entries by peer and alloc, kept with it: PurgePeer's walk
	zombies map[*Handle[V]]struct{}          // out of the index but still referenced
	closed  bool
	// closeDone is closed once the first Close has released what it
	// removed: a concurrent Close waits for it.
	closeDone chan struct{}

	regions int
	bytes   uint64

	purgeVisited uint64 // entries PurgePeer visited (a test hook)

	misses, importErrors, evictions, invalidations, purges uint64
	replaced, staleRefused, releases                       uint64
	hits, badPuts, releaseErrors                           atomic.Uint64
}

type slot struct {
	peer  PeerID
	alloc uint64
}

// readyShards is the number of shards of HandleCache.ready: a hit scans
// one shard's few entries, and publishing or withdrawing an entry copies
// one shard, about 1/readyShards of the cached entries. (A slice scan by
// a multiplicative hash: hashing the 32-byte slot for a Go map costs more
// than the rest of a hit.)
const readyShards = 256

func (s slot) shard() int {
	h := (s.alloc ^ uint64(s.peer.PID)<<32 ^ s.peer.PIDNS ^ s.peer.Instance*0xff51afd7ed558ccd) * 0x9e3779b97f4a7c15
	return int(h >> 56) // top 8 bits: 0..255
}

// lookupReady returns the ready entry of s, without the lock.
func (c *HandleCache[V]) lookupReady(s slot) *Handle[V] {
	if p := c.ready[s.shard()].Load(); p != nil {
		for _, h := range *p {
			if h.key.AllocID == s.alloc && h.key.Peer == s.peer {
				return h
			}
		}
	}
	return nil
}

// setReadyLocked publishes h as the ready entry of s (h != nil), or
// withdraws old if it is s's (h == nil).
func (c *HandleCache[V]) setReadyLocked(s slot, h, old *Handle[V]) {
	p := &c.ready[s.shard()]
	var cur []*Handle[V]
	if l := p.Load(); l != nil {
		cur = *l
	}
	next := make([]*Handle[V], 0, len(cur)+1)
	found := false
	for _, e := range cur {
		if e.key.AllocID == s.alloc && e.key.Peer == s.peer {
			found = found || e == old
			continue // replaced or withdrawn
		}
		next = append(next, e)
	}
	if h == nil && !found {
		return
	}
	if h != nil {
		next = append(next, h)
	}
	p.Store(&next)
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

	// refs counts the references; deadRef is set (with c.mu held) when the
	// entry leaves the index, after which no reference can be taken. The
	// one who sees it go to deadRef alone (the remover, or the last Put)
	// releases the value.
	refs    atomic.Uint64
	lastPut atomic.Uint64 // c.tick at the last Put that left it unreferenced: the LRU order

	// guarded by c.mu
	state      entryState
	hasValue   bool // the import succeeded: Release is owed
	released   bool
	indexed    bool
	err        error         // state failed
	removedErr error         // why the entry left the index
	done       chan struct{} // closed when loading ends
}

// deadRef marks, in Handle.refs, an entry that left the index.
const deadRef = 1 << 63

// tryAcquire takes a reference unless the entry left the index.
func (h *Handle[V]) tryAcquire() bool {
	for {
		x := h.refs.Load()
		if x&deadRef != 0 {
			return false
		}
		if h.refs.CompareAndSwap(x, x+1) {
			return true
		}
	}
}

// unref drops a reference and returns the new refs (deadRef included);
// ok is false if there was none. The last reference stamps lastPut from
// tick (nil: no stamp).
func (h *Handle[V]) unref(tick *atomic.Uint64) (refs uint64, ok bool) {
	for {
		x := h.refs.Load()
		if x&^deadRef == 0 {
			return x, false
		}
		if x&^deadRef == 1 && tick != nil {
			h.lastPut.Store(tick.Add(1))
		}
		if h.refs.CompareAndSwap(x, x-1) {
			return x - 1, true
		}
	}
}

// Value returns the imported value.
func (h *Handle[V]) Value() V { return h.val }

// Gone reports whether the entry left the cache's index (the exporter
// freed the buffer, or the peer went away): a holder should stop using it.
func (h *Handle[V]) Gone() bool { return h.gone.Load() }

// GoneFlag is the flag Gone reads, for a caller that checks it on a hot
// path without a call (the flag lives as long as the handle).
func (h *Handle[V]) GoneFlag() *atomic.Bool { return &h.gone }

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
	c := &HandleCache[V]{cfg: cfg, maxRegions: cfg.MaxRegions, maxBytes: cfg.MaxBytes, index: map[slot]*Handle[V]{},
		byPeer: map[PeerID]map[uint64]*Handle[V]{}, zombies: map[*Handle[V]]struct{}{}, closeDone: make(chan struct{})}
	if c.maxRegions == 0 {
		c.maxRegions = DefaultMaxRegions
	}
	if c.maxBytes == 0 {
		c.maxBytes = DefaultMaxBytes
	}
	return c
}

// Get returns a reference to the value imported for k, importing it with
// imp on a miss (see HandleCache for the rules). Errors: ErrClosed,
// ErrStale, ErrInvalid (nil imp), or an *ImportError.
func (c *HandleCache[V]) Get(k Key, imp Importer[V]) (*Handle[V], error) {
	return c.GetCtx(context.Background(), k, imp)
}

// TryGet is Get's hit path alone: a reference to the ready entry of k,
// or nil (without the lock, no import).
func (c *HandleCache[V]) TryGet(k Key) *Handle[V] {
	if h := c.lookupReady(slot{k.Peer, k.AllocID}); h != nil && h.key.Generation == k.Generation && h.tryAcquire() {
		c.hits.Add(1)
		return h
	}
	return nil
}

// GetCtx is Get whose wait for an import another Get is running ends
// with ctx: it then fails with ctx's error, wrapped. The import itself is
// bounded by imp, as for Get.
func (c *HandleCache[V]) GetCtx(ctx context.Context, k Key, imp Importer[V]) (*Handle[V], error) {
	if imp == nil {
		return nil, fmt.Errorf("%w: nil Importer", ErrInvalid)
	}
	if h := c.TryGet(k); h != nil {
		return h, nil
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
			c.hits.Add(1)
			c.acquireLocked(h)
			if h.state == ready {
				c.mu.Unlock()
				return h, nil
			}
			c.mu.Unlock()
			select {
			case <-h.done:
			case <-ctx.Done():
				c.mu.Lock()
				victims = c.unrefLocked(h, victims)
				c.mu.Unlock()
				c.release(victims)
				return nil, fmt.Errorf("ipc: waiting for the import of alloc %d: %w", k.AllocID, ctx.Err())
			}
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
	if c.byPeer[s.peer] == nil {
		c.byPeer[s.peer] = map[uint64]*Handle[V]{}
	}
	c.byPeer[s.peer][s.alloc] = h
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
	c.setReadyLocked(slot{h.key.Peer, h.key.AllocID}, h, nil)
	victims = c.evictLocked(victims)
	return nil
}

// acquireLocked takes a reference of an indexed entry (never dead).
func (c *HandleCache[V]) acquireLocked(h *Handle[V]) {
	h.refs.Add(1)
}

// unrefLocked drops a reference; the last one of an entry out of the
// index retires it (appended to victims for release).
func (c *HandleCache[V]) unrefLocked(h *Handle[V], victims []*Handle[V]) []*Handle[V] {
	r, ok := h.unref(&c.tick)
	switch {
	case !ok:
		c.badPuts.Add(1)
	case r == deadRef:
		victims = c.retireDeadLocked(h, victims)
	}
	return victims
}

// retireDeadLocked retires an entry that left the index and lost its
// last reference (its value, if the import succeeded).
func (c *HandleCache[V]) retireDeadLocked(h *Handle[V], victims []*Handle[V]) []*Handle[V] {
	delete(c.zombies, h)
	if h.hasValue {
		victims = c.retireLocked(h, victims)
	}
	return victims
}

// removeLocked takes h out of the index (why: the error a Get still
// importing it gets); unreferenced values are retired.
func (c *HandleCache[V]) removeLocked(h *Handle[V], why error, victims []*Handle[V]) []*Handle[V] {
	if !h.indexed {
		return victims
	}
	s := slot{h.key.Peer, h.key.AllocID}
	delete(c.index, s)
	if m := c.byPeer[s.peer]; m != nil {
		delete(m, s.alloc)
		if len(m) == 0 {
			delete(c.byPeer, s.peer)
		}
	}
	c.setReadyLocked(s, nil, h)
	h.indexed, h.removedErr = false, why
	h.gone.Store(true)
	if old := h.refs.Or(deadRef); old&^deadRef == 0 {
		return c.retireDeadLocked(h, victims)
	}
	c.zombies[h] = struct{}{}
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

// overLocked reports whether the cache is over a limit.
func (c *HandleCache[V]) overLocked() bool {
	return (c.maxRegions >= 0 && c.regions > c.maxRegions) || c.bytes > c.maxBytes
}

// evictLocked evicts unreferenced entries, least recently Put first,
// while the cache is over a limit.
func (c *HandleCache[V]) evictLocked(victims []*Handle[V]) []*Handle[V] {
	if !c.overLocked() {
		c.over.Store(false)
		return victims
	}
	// Set before the scan: a Put that unreferences an entry after the scan
	// sees it and evicts (once this is done with the lock).
	c.over.Store(true)
	type cand struct {
		h *Handle[V]
		t uint64
	}
	var cands []cand
	for _, h := range c.index {
		if h.state == ready && h.refs.Load() == 0 {
			cands = append(cands, cand{h, h.lastPut.Load()})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(a.t, b.t) })
	for _, e := range cands {
		if !c.overLocked() {
			break
		}
		if !e.h.refs.CompareAndSwap(0, deadRef) {
			continue // a Get took it meanwhile
		}
		c.evictions++
		victims = c.removeLocked(e.h, ErrStale, victims)
	}
	c.over.Store(c.overLocked()) // what is left is in use: Put evicts when it is not
	return victims
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
		c.badPuts.Add(1)
		return
	}
	r, ok := h.unref(&c.tick)
	switch {
	case !ok:
		c.badPuts.Add(1)
	case r == deadRef: // the last reference of an entry that left the cache
		c.mu.Lock()
		victims := c.retireDeadLocked(h, nil)
		c.mu.Unlock()
		c.release(victims)
	case r == 0 && c.over.Load(): // evictable again: the limits may now be enforceable
		c.mu.Lock()
		victims := c.evictLocked(nil)
		c.mu.Unlock()
		c.release(victims)
	}
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
	for _, h := range c.byPeer[peer] { // removeLocked deletes from it: allowed during range
		c.purgeVisited++
		c.purges++
		victims = c.removeLocked(h, fmt.Errorf("%w: peer %d purged", ErrStale, peer.PID), victims)
	}
	c.mu.Unlock()
	c.release(victims)
}

// Close removes every entry and releases the unreferenced ones; values
// still in use are released at their last Put. Get fails with ErrClosed
// afterwards. Close returns the Release errors of the values it released;
// later calls return nil, once the first has released them (a concurrent
// Close does not return while the first is still releasing).
func (c *HandleCache[V]) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.closeDone
		return nil
	}
	c.closed = true
	defer close(c.closeDone)
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
	inUse := 0
	for _, h := range c.index {
		if h.refs.Load()&^deadRef != 0 {
			inUse++
		}
	}
	for h := range c.zombies {
		if h.refs.Load()&^deadRef != 0 {
			inUse++
		}
	}
	return CacheStats{
		Hits: c.hits.Load(), Misses: c.misses, ImportErrors: c.importErrors, Evictions: c.evictions,
		Invalidations: c.invalidations, Purges: c.purges, Replaced: c.replaced, StaleRefused: c.staleRefused,
		Releases: c.releases, ReleaseErrors: c.releaseErrors.Load(), BadPuts: c.badPuts.Load(),
		Regions: c.regions, Bytes: c.bytes, InUse: inUse, Cached: len(c.index),
	}
}
