package memcache

import (
	"runtime"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"
)

// bigValueReg registers ranges with a value that owns a large object (as
// a host mapping keeps the mapped Go memory alive).
type bigValueReg struct{}

type bigValue struct{ mem *[4 << 20]byte }

func (bigValueReg) Register(uint64, uint64, Access) (any, error) {
	return &bigValue{mem: new([4 << 20]byte)}, nil
}
func (bigValueReg) Deregister(uint64, uint64, any) error { return nil }

// TestDeregisteredValueCollected: once a region is deregistered
// (invalidated, unreferenced), the cache keeps no reference to it or its
// value. A region of more than clearGranules granules keeps its hint-table
// entries after it leaves the index, and with them its value (and whatever
// the value keeps alive: registered caller memory) stays reachable until
// some other region happens to overwrite the entry.
func TestDeregisteredValueCollected(t *testing.T) {
	c, err := New(Config{Registrar: bigValueReg{}, Align: 4096})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	get := func(addr, n uint64) weak.Pointer[[4 << 20]byte] {
		r, err := c.Get(addr, n, AccessRead)
		require.NoError(t, err)
		w := weak.Make(r.Value().(*bigValue).mem)
		c.Put(r)
		r2, err := c.Get(addr, n, AccessRead) // a hit: through the hint table
		require.NoError(t, err)
		c.Put(r2)
		c.Invalidate(addr, n)
		return w
	}
	small := get(1<<30, 16*4096) // 16 granules
	large := get(2<<30, 1<<20)   // 256 granules
	require.Equal(t, 0, c.Stats().Regions)
	for range 3 {
		runtime.GC()
	}
	require.True(t, small.Value() == nil, "small region's value still reachable")
	require.True(t, large.Value() == nil, "deregistered large region's value still reachable from the cache")
}
