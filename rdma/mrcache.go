package rdma

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/internal/verbs"
	"github.com/gxfer/gxfer/memcache"
)

// MRCacheConfig configures an MRCache. The zero value is a page-aligned,
// unlimited cache without merging.
type MRCacheConfig struct {
	// Merge lets a new registration absorb the cached MRs it overlaps or
	// touches (one larger MR instead of several; see memcache.Config).
	Merge bool
	// MaxRegions and MaxBytes bound the live MRs (0: unlimited); idle
	// ones are deregistered, approximately least recently used first.
	MaxRegions int
	MaxBytes   uint64
	// NegativeTTL is how long a range that failed to register is
	// remembered (0: memcache.DefaultNegativeTTL, < 0: not at all).
	NegativeTTL time.Duration
	// Logger receives the cache's logs (zero value: discarded).
	Logger zerolog.Logger
}

// MRCache registers host memory on a PD through the registration cache
// (memcache.Cache with ibv_reg_mr as its Registrar), so that repeated
// transfers on the same buffer register it once. Ranges are registered
// page-aligned. All methods are safe for concurrent use.
//
// Memory given to Get must not be in the Go heap and must stay mapped until
// it has been invalidated (Invalidate, or Close) and every MRRef covering it
// put back (see memcache's "Memory lifetime").
//
// Close the MRCache before its PD: a PD with cached MRs refuses to close
// (ErrBusy). Device.Close deregisters cached MRs along with everything else.
type MRCache struct {
	pd     *PD // nil for a cache over a test registrar
	c      *memcache.Cache
	closed atomic.Bool
}

// cachedMR is what the cache stores per registration: *MR, or a fake in
// the package's tests.
type cachedMR interface {
	LKey() uint32
	RKey() uint32
	Close() error
}

// hostRegistrar adapts a registration function to memcache.Registrar.
type hostRegistrar func(addr, length uint64, access Access) (cachedMR, error)

func (f hostRegistrar) Register(addr, length uint64, a memcache.Access) (any, error) {
	m, err := f(addr, length, fromCacheAccess(a))
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (hostRegistrar) Deregister(_, _ uint64, v any) error { return v.(cachedMR).Close() }

// NewMRCache returns a registration cache of host-memory MRs on pd.
func NewMRCache(pd *PD, cfg MRCacheConfig) (*MRCache, error) {
	if pd == nil {
		return nil, fmt.Errorf("%w: nil PD", ErrInvalid)
	}
	c, err := newMRCache(func(addr, length uint64, access Access) (cachedMR, error) {
		mr, err := pd.registerHost(addr, length, access)
		if err != nil {
			return nil, err
		}
		return mr, nil
	}, cfg)
	if err != nil {
		return nil, err
	}
	c.pd = pd
	return c, nil
}

func newMRCache(reg hostRegistrar, cfg MRCacheConfig) (*MRCache, error) {
	c, err := memcache.New(memcache.Config{
		Registrar:   reg,
		Merge:       cfg.Merge,
		Align:       uint64(os.Getpagesize()),
		MaxRegions:  cfg.MaxRegions,
		MaxBytes:    cfg.MaxBytes,
		NegativeTTL: cfg.NegativeTTL,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &MRCache{c: c}, nil
}

// registerHost is Register by address: ibv_reg_mr of [addr, addr+length)
// with the iova equal to the address.
func (pd *PD) registerHost(addr, length uint64, access Access) (*MR, error) {
	return pd.register(func() (*verbs.MR, error) {
		return pd.pd.RegMR(uintptr(addr), length, addr, access)
	}, false)
}

// PD is the cache's protection domain.
func (c *MRCache) PD() *PD { return c.pd }

// Get returns a referenced MR covering [addr, addr+length) with at least
// the requested access (0 means AccessDefault), registering the
// page-aligned range on a miss; a hit costs no verbs call. Hand it back
// with Put. The MR stays registered while referenced, even if the range
// is invalidated meanwhile.
//
// A zero length, a range that wraps, or remote write/atomic access without
// AccessLocalWrite (which ibv_reg_mr refuses), or access bits above 1<<27
// return an error wrapping
// ErrInvalid; Get after Close one wrapping ErrClosed. A failed
// registration returns a *memcache.RegisterError wrapping the verbs error;
// the range then fails at once (memcache.ErrRecentlyFailed) for
// MRCacheConfig.NegativeTTL.
func (c *MRCache) Get(addr, length uint64, access Access) (MRRef, error) {
	if access == 0 {
		access = AccessDefault
	}
	if access>>(32-cacheExtraShift) != 0 {
		return MRRef{}, fmt.Errorf("%w: access %#x: unknown bits", ErrInvalid, uint32(access))
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return MRRef{}, fmt.Errorf("%w: access %#x: remote write or atomic needs local write", ErrInvalid, uint32(access))
	}
	if length == 0 || addr+length < addr {
		return MRRef{}, fmt.Errorf("%w: range [%#x, +%#x)", ErrInvalid, addr, length)
	}
	r, err := c.c.Get(addr, length, toCacheAccess(access))
	switch {
	case err == nil:
		return MRRef{r: r}, nil
	case errors.Is(err, memcache.ErrClosed):
		return MRRef{}, fmt.Errorf("%w: MR cache", ErrClosed)
	case errors.Is(err, memcache.ErrInvalid):
		return MRRef{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return MRRef{}, err
}

// GetBytes is Get for the memory of b (which must not be in the Go heap).
func (c *MRCache) GetBytes(b []byte, access Access) (MRRef, error) {
	if len(b) == 0 {
		return MRRef{}, fmt.Errorf("%w: empty registration", ErrInvalid)
	}
	return c.Get(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), uint64(len(b)), access)
}

// Put hands back a reference taken by Get. The MR is deregistered if this
// was its last reference and it has left the cache (invalidated, merged,
// evicted or closed). Putting the zero MRRef does nothing.
func (c *MRCache) Put(r MRRef) { c.c.Put(r.r) }

// Invalidate tells the cache that [addr, addr+length) is about to be
// freed or remapped: the cached MRs overlapping it leave the cache and are
// deregistered now if unreferenced, else at their last Put. Call it before
// unmapping registered memory.
func (c *MRCache) Invalidate(addr, length uint64) { c.c.Invalidate(addr, length) }

// Stats returns the cache's counters (Regions is the number of live MRs).
func (c *MRCache) Stats() memcache.Stats { return c.c.Stats() }

// Close deregisters every cached MR and makes later Gets fail with
// ErrClosed. MRs still referenced are deregistered at their last Put; if
// there are any, Close says so with an error wrapping ErrBusy (the cache
// is closed all the same). A second Close returns nil.
func (c *MRCache) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	err := c.c.Close()
	if n := c.c.Stats().Regions; n > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %d cached MRs still referenced; each is deregistered at its last Put", ErrBusy, n))
	}
	return err
}

// MRRef is a referenced, cached MR returned by MRCache.Get; a plain value
// (Get allocates nothing on a hit). Its accessors stay usable after Put,
// but the keys are only valid while the reference is held.
type MRRef struct {
	r *memcache.Region
}

// IsZero reports whether r is the zero MRRef (no reference; its other
// methods panic).
func (r MRRef) IsZero() bool { return r.r == nil }

// MR is the memory region, for Seg-based work requests.
func (r MRRef) MR() *MR {
	mr, _ := r.r.Value().(*MR)
	return mr
}

// LKey is the local key.
func (r MRRef) LKey() uint32 { return r.r.Value().(cachedMR).LKey() }

// RKey is the remote key.
func (r MRRef) RKey() uint32 { return r.r.Value().(cachedMR).RKey() }

// Addr is the start of the registered range (page-aligned, at or below
// the address asked for).
func (r MRRef) Addr() uint64 { return r.r.Addr() }

// Len is the registered length.
func (r MRRef) Len() uint64 { return r.r.Len() }

// Access is the access the range was registered with (a superset of the
// one asked for).
func (r MRRef) Access() Access { return fromCacheAccess(r.r.Access()) }

// Contains reports whether [addr, addr+length) lies inside the MR.
func (r MRRef) Contains(addr, length uint64) bool { return r.r.Contains(addr, length) }

// Seg is the local segment for n bytes at virtual address addr. QP.Post
// refuses a segment outside the MR (ErrInvalid).
func (r MRRef) Seg(addr, n uint64) Seg { return Seg{MR: r.MR(), Off: addr - r.r.Addr(), Len: n} }

// Remote is what a peer needs to RDMA into or out of n bytes at addr.
func (r MRRef) Remote(addr, n uint64) RemoteMR { return RemoteMR{Addr: addr, Len: n, RKey: r.RKey()} }

// Access bits as the registration cache sees them: a region serves a
// request when its bits are a superset. Local read is implied by every
// registration; the verbs bits beyond the three memcache names are carried
// above them.
const cacheExtraShift = 4

const verbsNamed = AccessLocalWrite | AccessRemoteRead | AccessRemoteWrite

func toCacheAccess(a Access) memcache.Access {
	m := memcache.AccessRead
	if a&AccessLocalWrite != 0 {
		m |= memcache.AccessWrite
	}
	if a&AccessRemoteRead != 0 {
		m |= memcache.AccessRemoteRead
	}
	if a&AccessRemoteWrite != 0 {
		m |= memcache.AccessRemoteWrite
	}
	return m | memcache.Access(a&^verbsNamed)<<cacheExtraShift
}

func fromCacheAccess(m memcache.Access) Access {
	var a Access
	if m&memcache.AccessWrite != 0 {
		a |= AccessLocalWrite
	}
	if m&memcache.AccessRemoteRead != 0 {
		a |= AccessRemoteRead
	}
	if m&memcache.AccessRemoteWrite != 0 {
		a |= AccessRemoteWrite
	}
	return a | Access(m>>cacheExtraShift)
}
