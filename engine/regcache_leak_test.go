package engine

import (
	"context"
	"runtime"
	"testing"
	"unsafe"
	"weak"

	"github.com/stretchr/testify/require"
)

// registerCopyDeregister registers a Go array of n bytes, copies it to the
// device once (mapping it through the registration cache), deregisters it
// and returns a weak pointer to the array.
func registerCopyDeregister[A any](t *testing.T, e *Engine, d *Buffer) weak.Pointer[A] {
	arr := new(A)
	mem := unsafeBytes(arr)
	b, err := e.Register(mem)
	require.NoError(t, err)
	require.NoError(t, e.CopySync(context.Background(), d.Slice(0, len(mem)), b.All()))
	require.NoError(t, b.Deregister())
	return weak.Make(arr)
}

// TestDeregisteredMemoryCollected: once caller memory is
// deregistered and every copy of it has ended, the engine keeps no
// reference to it, so the garbage collector can reclaim it.
func TestDeregisteredMemoryCollected(t *testing.T) {
	e := newEngine(t, Config{})
	d, err := e.Alloc(4<<20, Gaudi(0))
	require.NoError(t, err)
	small := registerCopyDeregister[[64 << 10]byte](t, e, d) // 16 pages
	large := registerCopyDeregister[[1 << 20]byte](t, e, d)  // 256 pages
	for range 5 {
		runtime.GC()
	}
	require.True(t, small.Value() == nil, "small registered memory still reachable")
	require.True(t, large.Value() == nil, "1 MiB of deregistered caller memory is still reachable from the engine")
}

func unsafeBytes[A any](p *A) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p))
}
