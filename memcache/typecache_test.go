package memcache

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemTypeString(t *testing.T) {
	assert.Equal(t, "host", MemHost.String())
	assert.Equal(t, "gaudi", MemGaudi.String())
	assert.Equal(t, "MemType(7)", MemType(7).String())
}

func TestTypeCache(t *testing.T) {
	tc := NewTypeCache()
	owner := &struct{ name string }{"hbm0"}
	require.NoError(t, tc.Insert(0x1000, 0x1000, MemGaudi, 2, owner))
	require.NoError(t, tc.Insert(0x2000, 0x100, MemHost, 0, nil), "adjacent is fine")
	require.NoError(t, tc.Insert(math.MaxUint64-0x10, 0x10, MemHost, 0, nil), "up to the top")

	for _, tc2 := range []struct {
		name         string
		addr, length uint64
	}{
		{"zero length", 0x5000, 0},
		{"wraps", math.MaxUint64, 2},
		{"overlaps start", 0xf00, 0x200},
		{"overlaps end", 0x1fff, 0x2},
		{"inside", 0x1100, 0x10},
		{"covers", 0, 0x10000},
		{"same", 0x1000, 0x1000},
	} {
		err := tc.Insert(tc2.addr, tc2.length, MemHost, 0, nil)
		require.ErrorIs(t, err, ErrInvalid, tc2.name)
	}

	want := Entry{Base: 0x1000, Len: 0x1000, Type: MemGaudi, Dev: 2, Owner: owner}
	for _, l := range []struct {
		addr, length uint64
		found        bool
	}{
		{0x1000, 0x1000, true},
		{0x1800, 1, true},
		{0x1fff, 1, true},
		{0x1fff, 0, true},
		{0x1000, 0, true},
		{0xfff, 2, false},  // partial
		{0x1fff, 2, false}, // partial, into the next range
		{0x1000, 0x1001, false},
		{0x800, 0x10, false},
		{math.MaxUint64 - 5, 10, false}, // wraps
	} {
		e, ok := tc.Lookup(l.addr, l.length)
		require.Equal(t, l.found, ok, "Lookup(%#x, %#x)", l.addr, l.length)
		if ok {
			require.Equal(t, want, e)
		} else {
			require.Zero(t, e)
		}
	}
	e, ok := tc.Lookup(math.MaxUint64-1, 1)
	require.True(t, ok)
	require.Equal(t, MemHost, e.Type)
	e, ok = tc.Lookup(math.MaxUint64-1, 0)
	require.True(t, ok)
	_, ok = tc.Lookup(math.MaxUint64, 0)
	require.False(t, ok, "MaxUint64 itself is not in a range ending there")

	tc.Remove(0x1000, 0x800) // not an inserted range: ignored
	tc.Remove(0x1800, 0x800)
	_, ok = tc.Lookup(0x1800, 1)
	require.True(t, ok)
	tc.Remove(0x1000, 0x1000)
	_, ok = tc.Lookup(0x1800, 1)
	require.False(t, ok)
	require.NoError(t, tc.Insert(0x1800, 0x800, MemGaudi, 1, nil), "the space is free again")

	var zero TypeCache // the zero value works
	_, ok = zero.Lookup(0, 1)
	require.False(t, ok)
	require.NoError(t, zero.Insert(0, 1, MemHost, 0, nil))
}

func TestTypeCacheModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	tc := NewTypeCache()
	owner := map[uint64]uint64{} // base -> length
	covering := func(addr, length uint64) (uint64, bool) {
		for b, l := range owner {
			if addr >= b && addr+length <= b+l {
				return b, true
			}
		}
		return 0, false
	}
	for range 5000 {
		addr, length := rng.Uint64N(1<<16), 1+rng.Uint64N(1<<10)
		switch rng.IntN(3) {
		case 0:
			overlap := false
			for b, l := range owner {
				if addr < b+l && b < addr+length {
					overlap = true
				}
			}
			err := tc.Insert(addr, length, MemGaudi, int(addr%8), addr)
			if overlap {
				require.ErrorIs(t, err, ErrInvalid)
			} else {
				require.NoError(t, err)
				owner[addr] = length
			}
		case 1:
			for b, l := range owner {
				tc.Remove(b, l)
				delete(owner, b)
				break
			}
		default:
			e, ok := tc.Lookup(addr, length)
			b, want := covering(addr, length)
			require.Equal(t, want, ok)
			if ok {
				require.Equal(t, Entry{Base: b, Len: owner[b], Type: MemGaudi, Dev: int(b % 8), Owner: b}, e)
			}
		}
	}
}

func TestTypeCacheConcurrent(t *testing.T) {
	tc := NewTypeCache()
	const n = 64
	for i := range uint64(n) {
		require.NoError(t, tc.Insert(i*0x10000, 0x1000, MemGaudi, int(i), nil))
	}
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 0))
			for range 5000 {
				i := rng.Uint64N(n)
				// Stable entries are always found; the churned ones may
				// or may not be, but never with the wrong contents.
				e, ok := tc.Lookup(i*0x10000+rng.Uint64N(0x1000), 1)
				if !ok || e.Dev != int(i) {
					errs <- fmt.Errorf("lookup of entry %d: %+v %v", i, e, ok)
					return
				}
				if e, ok := tc.Lookup(i*0x10000+0x8000, 1); ok && e.Base != i*0x10000+0x8000 {
					errs <- fmt.Errorf("churned lookup %d: %+v", i, e)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // writer churning other ranges
		defer wg.Done()
		for j := range 2000 {
			a := uint64(j%n)*0x10000 + 0x8000
			if err := tc.Insert(a, 0x100, MemHost, 0, nil); err != nil {
				errs <- err
				return
			}
			tc.Remove(a, 0x100)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
