package memcache

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
)

// MemType says where memory lives.
type MemType uint8

// Memory types.
const (
	MemHost  MemType = iota // host (CPU) memory
	MemGaudi                // Intel Gaudi device memory (HBM)
)

// String returns "host", "gaudi" or "MemType(N)".
func (t MemType) String() string {
	switch t {
	case MemHost:
		return "host"
	case MemGaudi:
		return "gaudi"
	}
	return "MemType(" + strconv.Itoa(int(t)) + ")"
}

// Entry is one range known to a [TypeCache].
type Entry struct {
	Base, Len uint64  // the whole range as inserted (e.g. the allocation)
	Type      MemType // where it lives
	Dev       int     // device index for device memory
	Owner     any     // opaque, set by the inserter (e.g. the allocation object)
}

// TypeCache maps address ranges to the kind of memory behind them, so data
// movement can pick a path from a bare address. Ranges never overlap. Lookups
// are lock-free and O(log n); updates are serialised. The zero value is an
// empty cache ready to use.
type TypeCache struct {
	mu   sync.Mutex                   // serialises writers
	root atomic.Pointer[node[*Entry]] // published copy-on-write
}

// NewTypeCache returns an empty TypeCache.
func NewTypeCache() *TypeCache { return &TypeCache{} }

// Insert records [addr, addr+length) as memory of type typ on device dev. It
// returns ErrInvalid for an empty or wrapping range or one that overlaps a
// range already present.
func (t *TypeCache) Insert(addr, length uint64, typ MemType, dev int, owner any) error {
	end := addr + length
	if length == 0 || end <= addr {
		return fmt.Errorf("%w: range [%#x, +%#x)", ErrInvalid, addr, length)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	root := t.root.Load()
	// Ranges are disjoint and sorted, so the last one starting before end is
	// the only one that can reach past addr.
	if _, e, ok := root.floor(end - 1); ok && e.Base+e.Len > addr {
		return fmt.Errorf("%w: range [%#x, %#x) overlaps [%#x, %#x)", ErrInvalid, addr, end, e.Base, e.Base+e.Len)
	}
	t.root.Store(root.insert(addr, &Entry{Base: addr, Len: length, Type: typ, Dev: dev, Owner: owner}))
	return nil
}

// Remove forgets the range [addr, addr+length), which must be exactly a range
// inserted earlier; anything else is ignored.
func (t *TypeCache) Remove(addr, length uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	root := t.root.Load()
	if k, e, ok := root.floor(addr); !ok || k != addr || e.Len != length {
		return
	}
	root, _ = root.delete(addr)
	t.root.Store(root)
}

// Lookup returns the range that fully contains [addr, addr+length); a range
// that is only partly covered is not found. A zero length looks up the
// single address addr.
func (t *TypeCache) Lookup(addr, length uint64) (Entry, bool) {
	_, e, ok := t.root.Load().floor(addr)
	if !ok {
		return Entry{}, false
	}
	last := addr + length - 1 // last byte asked for
	if length == 0 {
		last = addr
	}
	if last < addr || last > e.Base+e.Len-1 {
		return Entry{}, false
	}
	return *e, true
}
