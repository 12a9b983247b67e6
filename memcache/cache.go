package memcache

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Errors returned by the cache. Compare with [errors.Is].
var (
	// ErrClosed is returned by Get after Close. It also matches os.ErrClosed.
	ErrClosed = fmt.Errorf("memcache: cache closed: %w", os.ErrClosed)
	// ErrInvalid reports a bad argument: a zero length, a range that wraps
	// around the address space, a bad Config, an overlapping TypeCache
	// insert. It also matches os.ErrInvalid.
	ErrInvalid = fmt.Errorf("memcache: %w", os.ErrInvalid)
	// ErrRecentlyFailed matches a [*RegisterError] served from the
	// negative cache, without calling the Registrar again.
	ErrRecentlyFailed = errors.New("memcache: range failed to register recently")
)

// RegisterError reports a failed registration. It wraps the Registrar's error,
// so errors.Is and errors.As see through it. When Cached is true the failure
// was remembered from an earlier attempt (see Config.NegativeTTL) and the
// error also matches [ErrRecentlyFailed].
type RegisterError struct {
	Addr, Len uint64 // the range whose registration failed
	Access    Access // the access it was registered with
	Cached    bool   // served from the negative cache
	Err       error  // the Registrar's error
}

func (e *RegisterError) Error() string {
	how := "failed"
	if e.Cached {
		how = "failed recently"
	}
	return fmt.Sprintf("memcache: registering [%#x, %#x) %s %s: %v", e.Addr, e.Addr+e.Len, e.Access, how, e.Err)
}

// Unwrap returns the Registrar's error.
func (e *RegisterError) Unwrap() error { return e.Err }

// Is makes a cached failure match ErrRecentlyFailed.
func (e *RegisterError) Is(target error) bool { return e.Cached && target == ErrRecentlyFailed }

// Registrar performs the expensive registration the cache amortises: a
// Gaudi host-memory MMU mapping, a DMA-BUF export, an InfiniBand memory
// registration... The cache never interprets the value it returns.
//
// The cache calls Register and Deregister with its slow-path lock held, so
// calls are serialised per cache and must not call back into the cache.
// Register is called with ranges expanded to Config.Align and, with
// Config.Merge, widened to absorb neighbouring registrations; Deregister is
// called exactly once for every successful Register, with the same range and
// the value Register returned.
type Registrar interface {
	Register(addr, length uint64, access Access) (value any, err error)
	Deregister(addr, length uint64, value any) error
}

// Config configures a [Cache].
type Config struct {
	// Registrar does the registrations. Required.
	Registrar Registrar
	// Merge lets a new registration absorb every indexed region that
	// overlaps or touches it (start = min, end = max, access = union). If
	// the merged range fails to register, the request's own range is tried
	// alone. Without Merge, a new registration covers exactly the aligned
	// request and replaces the indexed regions it overlaps (see Cache.Get).
	Merge bool
	// Align, when > 0, must be a power of two; registered ranges are
	// expanded outwards to multiples of it (e.g. the page size).
	Align uint64
	// MaxRegions and MaxBytes bound the live registrations (0 =
	// unlimited). When a new registration exceeds either, unreferenced
	// indexed regions are evicted in approximate LRU order. Referenced
	// regions are never evicted, so the limits are soft: if everything is
	// in use they are exceeded until regions are released.
	MaxRegions int
	MaxBytes   uint64
	// NegativeTTL is how long a range that failed to register is
	// remembered; a Get of the same aligned range fails with a cached
	// RegisterError without calling the Registrar (see Cache.Get). 0
	// means the default (100ms), < 0 disables.
	NegativeTTL time.Duration
	// Logger receives the cache's logs. The zero value discards them.
	Logger zerolog.Logger
	// Now returns the current time; tests replace it. Default time.Now.
	Now func() time.Time
}

// DefaultNegativeTTL is used when Config.NegativeTTL is 0.
const DefaultNegativeTTL = 100 * time.Millisecond

// Stats is a snapshot of a cache's counters. Counters are cumulative since
// New; the last group describes the current state.
type Stats struct {
	Gets         uint64 // Get calls (= HitsFast + HitsSlow + Misses + NegativeHits + Rejected)
	HitsFast     uint64 // served lock-free (from the hint table or the index)
	HitsSlow     uint64 // served from the index under the slow-path lock (lost a race with a writer)
	Misses       uint64 // needed a new registration (successful or not)
	NegativeHits uint64 // failed from the negative cache without calling the Registrar
	Rejected     uint64 // failed with ErrInvalid or ErrClosed

	Merges                uint64 // indexed regions absorbed into (Merge) or replaced by (no Merge) a new registration
	Evictions             uint64 // regions evicted to honour MaxRegions/MaxBytes
	Invalidations         uint64 // regions removed from the index by Invalidate or Close
	Registrations         uint64 // successful Registrar.Register calls
	FailedRegistrations   uint64 // failed Registrar.Register calls
	Deregistrations       uint64 // Registrar.Deregister calls
	FailedDeregistrations uint64 // Registrar.Deregister calls that returned an error
	BadPuts               uint64 // Put calls ignored: the region had no reference left, or belongs to another cache

	Regions         int    // live registrations (= Registrations - Deregistrations)
	RegisteredBytes uint64 // bytes covered by live registrations
	Detached        int    // live registrations no longer in the index, waiting for their last Put
	InUseRegions    int    // live registrations with at least one caller reference
}

// AddCounters adds o's counters to s, leaving s's gauges (Regions,
// RegisteredBytes, Detached, InUseRegions): the counts of a cache that
// replaced o's (a device opened again after its reset) then go on from
// where o's stopped.
func (s *Stats) AddCounters(o Stats) {
	s.Gets += o.Gets
	s.HitsFast += o.HitsFast
	s.HitsSlow += o.HitsSlow
	s.Misses += o.Misses
	s.NegativeHits += o.NegativeHits
	s.Rejected += o.Rejected
	s.Merges += o.Merges
	s.Evictions += o.Evictions
	s.Invalidations += o.Invalidations
	s.Registrations += o.Registrations
	s.FailedRegistrations += o.FailedRegistrations
	s.Deregistrations += o.Deregistrations
	s.FailedDeregistrations += o.FailedDeregistrations
	s.BadPuts += o.BadPuts
}

// Cache is a registration cache. All methods are safe for concurrent use.
type Cache struct {
	// Read by every Get; written only by the slow path.
	hints  atomic.Pointer[hintTable]     // granule -> region hints, checked before the index (hint.go)
	root   atomic.Pointer[node[*Region]] // the index, published copy-on-write
	maxEnd uint64                        // largest request end whose aligned end is representable
	gshift uint                          // log2 of the hint table's granule
	_      [32]byte                      // keep the fields written below off the fast path's cache line

	// idleHint is set when an indexed region loses its last caller
	// reference and cleared by an eviction sweep that found nothing to
	// evict, so that a cache over its limits with everything in use does
	// not rescan the index on every miss.
	idleHint atomic.Bool
	rejected atomic.Uint64
	badPuts  atomic.Uint64

	reg     Registrar
	merge   bool
	align   uint64
	limited bool
	maxRegs int
	maxByts uint64
	now     func() time.Time
	log     zerolog.Logger

	mu        sync.Mutex // the slow-path lock; guards everything below and all Registrar calls
	closed    bool
	indexed   int                  // regions in the index
	granules  int                  // sum of hintKeys over the index: what the hint table is sized by
	live      int                  // registered and not yet deregistered
	liveBytes uint64               // bytes of live
	detached  map[*Region]struct{} // live, out of the index, still referenced
	hand      uint64               // CLOCK hand: eviction resumes at this address
	neg       negCache
	st        Stats  // cumulative counters owned by the slow path
	deadHits  uint64 // fast hits of regions already deregistered
}

// New returns a cache configured by cfg.
func New(cfg Config) (*Cache, error) {
	if cfg.Registrar == nil {
		return nil, fmt.Errorf("%w: Config.Registrar is nil", ErrInvalid)
	}
	if cfg.Align&(cfg.Align-1) != 0 {
		return nil, fmt.Errorf("%w: Config.Align %d is not a power of two", ErrInvalid, cfg.Align)
	}
	if cfg.MaxRegions < 0 {
		return nil, fmt.Errorf("%w: Config.MaxRegions %d is negative", ErrInvalid, cfg.MaxRegions)
	}
	c := &Cache{
		reg:      cfg.Registrar,
		merge:    cfg.Merge,
		align:    max(cfg.Align, 1),
		maxRegs:  cfg.MaxRegions,
		maxByts:  cfg.MaxBytes,
		limited:  cfg.MaxRegions > 0 || cfg.MaxBytes > 0,
		now:      cfg.Now,
		log:      cfg.Logger.With().Str("component", "memcache").Logger(),
		detached: make(map[*Region]struct{}),
	}
	c.maxEnd = math.MaxUint64 &^ (c.align - 1)
	c.gshift = hintShift(c.align)
	c.hints.Store(newHintTable(minHintShift))
	if c.now == nil {
		c.now = time.Now
	}
	c.neg.ttl = cfg.NegativeTTL
	if c.neg.ttl == 0 {
		c.neg.ttl = DefaultNegativeTTL
	}
	c.idleHint.Store(true)
	return c, nil
}

// Get returns a referenced region that covers [addr, addr+length) with at
// least the requested access, registering the range if no indexed region
// covers it. The caller must hand the region back with Put.
//
// On a miss the request is expanded to Config.Align and registered. With
// Config.Merge the registration absorbs every indexed region it overlaps or
// touches; without it, the indexed regions it overlaps are replaced (the new
// registration also gets their access, and if that fails only the requested
// access is tried). Absorbed or replaced regions leave the index, but callers
// holding them keep valid registrations until they Put them.
//
// A failed registration returns a [*RegisterError]. The failed range is
// remembered for Config.NegativeTTL, and a later Get whose aligned range is
// the same, asking for at least the same access, fails with a cached
// RegisterError (matching [ErrRecentlyFailed]) without calling the
// Registrar. A Get of a smaller range inside it is tried: the failure may
// come from a page that range does not touch.
//
// Get returns ErrInvalid for a zero length or a range that wraps around the
// address space, and ErrClosed after Close.
func (c *Cache) Get(addr, length uint64, access Access) (*Region, error) {
	end := addr + length
	if length == 0 || end <= addr || end > c.maxEnd {
		c.rejected.Add(1)
		return nil, fmt.Errorf("%w: range [%#x, +%#x)", ErrInvalid, addr, length)
	}
	// Fast path, first the hint table: an indexed region covering the
	// request is the answer, however it was found (see hint.go).
	if t := c.hints.Load(); t != nil {
		if r := t.lookup(addr>>c.gshift, addr, end); r != nil && r.access&access == access && r.acquire() {
			return r, nil
		}
	}
	// Then the index: regions never overlap, so the only candidate is the
	// one with the greatest start <= addr. acquire fails if the region left
	// the index after we loaded the root; the slow path then sorts it out.
	if _, r, ok := c.root.Load().floor(addr); ok && end <= r.end && r.access&access == access && r.acquire() {
		c.hint(addr, r)
		return r, nil
	}
	return c.getSlow(addr, end, access)
}

func (c *Cache) getSlow(addr, end uint64, access Access) (*Region, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.rejected.Add(1)
		return nil, ErrClosed
	}
	if _, r, ok := c.root.Load().floor(addr); ok && end <= r.end && r.access&access == access {
		c.acquireLocked(r)
		c.st.HitsSlow++
		c.hint(addr, r)
		return r, nil
	}
	if err := c.neg.lookup(addr&^(c.align-1), (end+c.align-1)&^(c.align-1), access, c.now()); err != nil {
		c.st.NegativeHits++
		return nil, err
	}
	c.st.Misses++
	r, err := c.registerLocked(addr, end, access)
	if err == nil {
		c.hint(addr, r)
	}
	return r, err
}

// acquireLocked takes a reference on an indexed region under the lock,
// first moving its hit count out of the state word so the fast path never
// finds it saturated for long.
func (c *Cache) acquireLocked(r *Region) {
	for {
		st := r.state.Load()
		if st&stateIndexed == 0 {
			panic("memcache: indexed region without stateIndexed")
		}
		if st&stateRefs == stateRefs {
			panic("memcache: reference count overflow (missing Puts?)")
		}
		if r.state.CompareAndSwap(st, (st&^stateHits+1)|stateRecent) {
			r.hits += (st & stateHits) / hitOne
			return
		}
	}
}

// registerLocked handles a miss: it registers a region covering [addr, end)
// and indexes it in place of the regions it overlaps.
func (c *Cache) registerLocked(addr, end uint64, access Access) (*Region, error) {
	ws, we := addr&^(c.align-1), (end+c.align-1)&^(c.align-1)

	// The wide attempt: the merged range (Merge) or the request with the
	// access of the regions it replaces (no Merge).
	ms, me, macc := ws, we, access
	if c.merge {
		for {
			ns, ne, nacc := ms, me, macc
			c.overlapping(ms, me, true, func(r *Region) {
				ns, ne, nacc = min(ns, r.start), max(ne, r.end), nacc|r.access
			})
			if ns == ms && ne == me && nacc == macc {
				break
			}
			ms, me, macc = ns, ne, nacc
		}
	} else {
		c.overlapping(ws, we, false, func(r *Region) { macc |= r.access })
	}
	if ms != ws || me != we || macc != access {
		r, err := c.newRegionLocked(ms, me, macc)
		if err == nil {
			c.indexLocked(r, c.merge)
			return r, nil
		}
		c.log.Debug().Err(err).Msg("wide registration failed, retrying the request alone")
	}

	r, err := c.newRegionLocked(ws, we, access)
	if err != nil {
		rerr := &RegisterError{Addr: ws, Len: we - ws, Access: access, Err: err}
		c.neg.add(ws, we, access, err, c.now())
		return nil, rerr
	}
	c.indexLocked(r, false)
	return r, nil
}

// newRegionLocked registers [start, end) and returns the new region with one
// caller reference, not yet indexed.
func (c *Cache) newRegionLocked(start, end uint64, access Access) (*Region, error) {
	v, err := c.reg.Register(start, end-start, access)
	if err != nil {
		c.st.FailedRegistrations++
		c.log.Warn().Err(err).Uint64("addr", start).Uint64("len", end-start).
			Stringer("access", access).Msg("registration failed")
		return nil, err
	}
	c.st.Registrations++
	c.live++
	c.liveBytes += end - start
	r := &Region{start: start, end: end, access: access, value: v, cache: c}
	// No recent bit: a region used once is the first to go (only hits
	// set the bit), which keeps one-off registrations from pushing out
	// regions that are used again and again.
	r.state.Store(stateIndexed | 1)
	return r, nil
}

// indexLocked removes the regions that r overlaps (and, if touching, the
// ones it touches) from the index, inserts r and enforces the limits.
func (c *Cache) indexLocked(r *Region, touching bool) {
	var old []*Region
	c.overlapping(r.start, r.end, touching, func(o *Region) { old = append(old, o) })
	for _, o := range old {
		c.unindexLocked(o)
		c.st.Merges++
	}
	c.root.Store(c.root.Load().insert(r.start, r))
	c.indexed++
	c.granules += c.hintKeys(r)
	c.growHintsLocked()
	c.log.Debug().Uint64("addr", r.start).Uint64("len", r.Len()).Stringer("access", r.access).
		Int("absorbed", len(old)).Msg("registered")
	c.evictLocked()
}

// overlapping calls fn for each indexed region that overlaps [start, end)
// or, if touching, also each one that ends at start or begins at end.
func (c *Cache) overlapping(start, end uint64, touching bool, fn func(*Region)) {
	root := c.root.Load()
	from := start
	if touching && from > 0 {
		from-- // include a region ending exactly at start
	}
	if k, _, ok := root.floor(from); ok {
		from = k
	}
	root.ascend(from, func(_ uint64, r *Region) bool {
		if r.start > end || (r.start == end && !touching) {
			return false
		}
		if r.end > start || (r.end == start && touching) {
			fn(r)
		}
		return true
	})
}

// unindexLocked takes r out of the index and drops the index's reference:
// r is deregistered now if unreferenced, else at its last Put.
func (c *Cache) unindexLocked(r *Region) error {
	c.deleteLocked(r)
	return c.dropIndexRefLocked(r)
}

// deleteLocked removes r from the index (and nothing else).
func (c *Cache) deleteLocked(r *Region) {
	root, ok := c.root.Load().delete(r.start)
	if !ok {
		panic("memcache: indexed region missing from the index")
	}
	c.root.Store(root)
	c.indexed--
	c.granules -= c.hintKeys(r)
	c.clearHintsLocked(r)
}

// dropIndexRefLocked clears r's indexed bit; see unindexLocked.
func (c *Cache) dropIndexRefLocked(r *Region) error {
	for {
		st := r.state.Load()
		nst := st &^ (stateIndexed | stateRecent)
		if r.state.CompareAndSwap(st, nst) {
			if nst&stateRefs == 0 {
				return c.destroyLocked(r)
			}
			c.detached[r] = struct{}{}
			return nil
		}
	}
}

// destroyLocked deregisters a dead region (out of the index, unreferenced).
func (c *Cache) destroyLocked(r *Region) error {
	delete(c.detached, r)
	c.purgeHintsLocked(r) // no hint may keep a dead region (and its value) reachable
	c.live--
	c.liveBytes -= r.Len()
	c.deadHits += r.fastHits()
	c.st.Deregistrations++
	if err := c.reg.Deregister(r.start, r.Len(), r.value); err != nil {
		c.st.FailedDeregistrations++
		c.log.Error().Err(err).Uint64("addr", r.start).Uint64("len", r.Len()).Msg("deregistration failed")
		return fmt.Errorf("memcache: deregistering [%#x, %#x): %w", r.start, r.end, err)
	}
	return nil
}

// destroy is destroyLocked for callers that do not hold the lock.
func (c *Cache) destroy(r *Region) {
	c.mu.Lock()
	defer c.mu.Unlock()    // the Registrar may panic
	_ = c.destroyLocked(r) // logged and counted there
}

func (c *Cache) overLimit() bool {
	return c.maxRegs > 0 && c.live > c.maxRegs || c.maxByts > 0 && c.liveBytes > c.maxByts
}

// evictLocked evicts unreferenced indexed regions until the cache is within
// its limits, using CLOCK over the index in address order: a hit sets a
// region's recent bit, the hand clears it, and a region the hand finds
// unreferenced without the bit is evicted. The hand visits each region at
// most twice per call, so a cache whose regions are all in use gives up
// after two passes (and skips the scan entirely until a Put makes some
// region idle again).
func (c *Cache) evictLocked() {
	if !c.limited || !c.overLimit() || !c.idleHint.Load() {
		return
	}
	c.idleHint.Store(false)
	budget := 2 * c.indexed
	for budget > 0 && c.overLimit() {
		root := c.root.Load()
		if root == nil {
			break
		}
		next, atEnd := uint64(0), true
		root.ascend(c.hand, func(k uint64, r *Region) bool {
			budget--
			next = k + 1 // a region cannot start at MaxUint64
			if (c.tryEvictLocked(r) && !c.overLimit()) || budget == 0 {
				atEnd = false
				return false
			}
			return true
		})
		if atEnd {
			next = 0
		}
		c.hand = next
	}
	if !c.overLimit() {
		c.idleHint.Store(true) // there may be more idle regions
	}
}

// tryEvictLocked evicts r if it is unreferenced and not recently used,
// clearing its recent bit otherwise.
func (c *Cache) tryEvictLocked(r *Region) bool {
	for {
		st := r.state.Load()
		switch {
		case st&stateIndexed == 0 || st&stateRefs != 0:
			return false
		case st&stateRecent != 0:
			if r.state.CompareAndSwap(st, st&^stateRecent) {
				return false
			}
		default:
			// The CAS races with fast-path acquires: exactly one wins.
			if r.state.CompareAndSwap(st, st&^stateIndexed) {
				c.deleteLocked(r)
				c.st.Evictions++
				c.log.Debug().Uint64("addr", r.start).Uint64("len", r.Len()).Msg("evicted")
				_ = c.destroyLocked(r) // logged and counted there
				return true
			}
		}
	}
}

// Put drops one reference to r, taken by Get. The region is deregistered if
// this was its last reference and it has left the index.
//
// Putting a region that has no reference left is a bug in the caller; Put
// then does nothing but log a warning and count Stats.BadPuts. (An extra Put
// while other references exist cannot be told apart from a legitimate one.)
func (c *Cache) Put(r *Region) {
	if r == nil {
		return
	}
	if r.cache != c {
		c.badPuts.Add(1)
		c.log.Warn().Uint64("addr", r.start).Uint64("len", r.Len()).Msg("Put of a region from another cache ignored")
		return
	}
	for {
		st := r.state.Load()
		if st&stateRefs == 0 {
			c.badPuts.Add(1)
			c.log.Warn().Uint64("addr", r.start).Uint64("len", r.Len()).Msg("Put of a fully released region ignored")
			return
		}
		nst := st - 1
		if !r.state.CompareAndSwap(st, nst) {
			continue
		}
		switch {
		case nst&stateLive == 0:
			// Out of the index and unreferenced: nobody can take a
			// reference any more, so we own the deregistration.
			c.destroy(r)
		case nst&stateRefs == 0 && c.limited && !c.idleHint.Load():
			c.idleHint.Store(true)
		}
		return
	}
}

// Invalidate tells the cache that [addr, addr+length) is being freed or
// remapped: every indexed region overlapping it leaves the index, so later
// Gets register afresh. Unreferenced regions are deregistered now, the
// others at their last Put. Remembered registration failures overlapping the
// range are forgotten. A zero length does nothing; a range past the end of
// the address space is clipped.
func (c *Cache) Invalidate(addr, length uint64) {
	if length == 0 {
		return
	}
	end := addr + length
	if end < addr {
		end = math.MaxUint64
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old []*Region
	c.overlapping(addr, end, false, func(r *Region) { old = append(old, r) })
	for _, r := range old {
		_ = c.unindexLocked(r) // logged and counted there
		c.st.Invalidations++
	}
	c.neg.forget(addr, end)
}

// Stats returns a snapshot of the cache's counters. It walks the index, so it
// costs O(regions).
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.Rejected = c.rejected.Load()
	s.BadPuts = c.badPuts.Load()
	s.HitsFast = c.deadHits
	s.Regions, s.RegisteredBytes, s.Detached = c.live, c.liveBytes, len(c.detached)
	s.InUseRegions = len(c.detached)
	for r := range c.detached {
		s.HitsFast += r.fastHits()
	}
	c.root.Load().ascend(0, func(_ uint64, r *Region) bool {
		s.HitsFast += r.fastHits()
		if r.state.Load()&stateRefs != 0 {
			s.InUseRegions++
		}
		return true
	})
	s.Gets = s.HitsFast + s.HitsSlow + s.Misses + s.NegativeHits + s.Rejected
	return s
}

// Close invalidates everything: unreferenced regions are deregistered now,
// referenced ones at their last Put. Later Gets fail with ErrClosed. Close
// returns the Deregister errors it met, joined; calling it again does
// nothing and returns nil.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	c.root.Load().ascend(0, func(_ uint64, r *Region) bool {
		if err := c.dropIndexRefLocked(r); err != nil {
			errs = append(errs, err)
		}
		c.st.Invalidations++
		return true
	})
	c.root.Store(nil)
	c.hints.Store(nil)
	c.indexed, c.granules = 0, 0
	c.neg.entries = nil
	return errors.Join(errs...)
}
