package engine

import (
	"bytes"
	"context"
	"math"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stretchr/testify/require"
)

// TestBufAPIRegister: Register refuses nil, empty, duplicate and
// overlapping memory with ErrInvalid, and ErrClosed after Close.
func TestBufAPIRegister(t *testing.T) {
	e := newEngine(t, Config{})
	mem := make([]byte, 8192)
	b, err := e.Register(mem)
	require.NoError(t, err)
	a, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		mem  []byte
	}{
		{"nil", nil},
		{"empty", mem[:0]},
		{"same", mem},
		{"inside", mem[100:200]},
		{"engine memory", a.Bytes()[10:20]},
	} {
		_, err := e.Register(tc.mem)
		require.ErrorIs(t, err, ErrInvalid, tc.name)
	}
	require.NoError(t, b.Deregister())
	require.NoError(t, b.Deregister())
	b2, err := e.Register(mem[1:])
	require.NoError(t, err)
	require.NoError(t, b2.Free())
}

func TestBufAPISliceBounds(t *testing.T) {
	e := newEngine(t, Config{})
	b, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	d, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		off, n int
	}{
		{"neg off", -1, 1}, {"neg n", 0, -1}, {"past end", 4096, 1}, {"long", 1, 4096},
		{"overflow off", math.MaxInt, 1}, {"overflow n", 1, math.MaxInt}, {"min", math.MinInt, 10},
		{"zero", 0, 0}, {"zero at end", 4096, 0},
	} {
		s := b.Slice(tc.off, tc.n)
		err := e.CopySync(context.Background(), d.Slice(0, max(tc.n, 0)), s)
		require.ErrorIs(t, err, ErrInvalid, tc.name)
		err = e.CopySync(context.Background(), s, d.Slice(0, max(tc.n, 0)))
		require.ErrorIs(t, err, ErrInvalid, tc.name)
	}
	var nb *Buffer
	require.ErrorIs(t, e.CopySync(context.Background(), nb.Slice(0, 1), d.Slice(0, 1)), ErrInvalid)
	require.ErrorIs(t, e.CopySync(context.Background(), Slice{}, d.Slice(0, 1)), ErrInvalid)
}

func TestBufAPIFreed(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 1})
	for _, loc := range []Location{Host, Gaudi(0)} {
		b, err := e.Alloc(1<<20, loc)
		require.NoError(t, err)
		d, err := e.Alloc(1<<20, Host)
		require.NoError(t, err)
		f := e.Copy(context.Background(), d.All(), b.All())
		require.NoError(t, b.Free())
		require.NoError(t, b.Free())
		require.NoError(t, f.Wait(context.Background()))
		require.ErrorIs(t, e.CopySync(context.Background(), d.All(), b.All()), ErrFreed)
		require.ErrorIs(t, e.CopySync(context.Background(), b.Slice(0, 10), d.Slice(0, 10)), ErrFreed)
		e2 := newEngine(t, Config{})
		x, err := e2.Alloc(10, Host)
		require.NoError(t, err)
		require.ErrorIs(t, e.CopySync(context.Background(), x.All(), d.Slice(0, 10)), ErrForeign)
		require.NoError(t, x.Free())
	}
}

// TestBufAPIOverlap: overlapping host ranges are copied as memmove does
// (Copy and Batch, every kernel size); overlapping ranges of one Gaudi
// buffer are refused with ErrInvalid (Copy, and a Batch as a whole), as
// Copy's documentation says.
func TestBufAPIOverlap(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 1})
	for _, n := range []int{100, 4096, 64 << 10, 1 << 20, 8 << 20} {
		for _, shift := range []int{1, 7, 4096, -1, -4096} {
			if abs(shift) >= n {
				continue
			}
			size := n + abs(shift)
			for _, mode := range []string{"copy", "batch"} {
				b, err := e.Alloc(size, Host)
				require.NoError(t, err)
				fill(b.Bytes(), uint64(n+shift))
				want := append([]byte(nil), b.Bytes()...)
				so, do := 0, shift
				if shift < 0 {
					so, do = -shift, 0
				}
				copy(want[do:do+n], want[so:so+n])
				if mode == "copy" {
					require.NoError(t, e.CopySync(context.Background(), b.Slice(do, n), b.Slice(so, n)))
				} else {
					bt := e.NewBatch()
					bt.Copy(b.Slice(do, n), b.Slice(so, n))
					require.NoError(t, bt.Submit(context.Background()).Wait(context.Background()))
				}
				require.True(t, bytes.Equal(want, b.Bytes()), "n %d shift %d %s", n, shift, mode)
				require.NoError(t, b.Free())
			}
		}
	}
	g, err := e.Alloc(8192, Gaudi(0))
	require.NoError(t, err)
	require.ErrorIs(t, e.CopySync(context.Background(), g.Slice(0, 4096), g.Slice(1, 4096)), ErrInvalid)
	bt := e.NewBatch()
	bt.Copy(g.Slice(4096, 4096), g.Slice(0, 4096)) // adjacent: valid
	bt.Copy(g.Slice(1, 4096), g.Slice(0, 4096))
	f := bt.Submit(context.Background())
	require.ErrorIs(t, f.Wait(context.Background()), ErrInvalid)
	require.ErrorIs(t, f.Errs()[1], ErrInvalid)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func TestBufAPIBatch(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 1})
	f := e.NewBatch().Submit(context.Background())
	require.NoError(t, f.Wait(context.Background()))
	t.Logf("empty Errs %v", f.Errs())
	const n = 20000
	src, err := e.Alloc(n*16, Host)
	require.NoError(t, err)
	fill(src.Bytes(), 3)
	g, err := e.Alloc(n*16, Gaudi(0))
	require.NoError(t, err)
	dst, err := e.Alloc(n*16, Host)
	require.NoError(t, err)
	hd, err := e.Alloc(n*16, Host)
	require.NoError(t, err)
	bt := e.NewBatch()
	for i := 0; i < n; i++ {
		bt.Copy(g.Slice(i*16, 16), src.Slice(i*16, 16))
		bt.Copy(hd.Slice(i*16, 16), src.Slice(i*16, 16))
	}
	f = bt.Submit(context.Background())
	require.NoError(t, f.Wait(context.Background()))
	require.Len(t, f.Errs(), 2*n)
	for i := 0; i < n; i++ {
		bt.Copy(dst.Slice(i*16, 16), g.Slice(i*16, 16))
	}
	require.NoError(t, bt.Submit(context.Background()).Wait(context.Background()))
	require.Equal(t, src.Bytes(), dst.Bytes())
	require.Equal(t, src.Bytes(), hd.Bytes())
	bt.Copy(dst.Slice(0, 16), g.Slice(0, 16))
	bt.Copy(dst.Slice(0, 0), g.Slice(0, 0))
	f = bt.Submit(context.Background())
	err = f.Wait(context.Background())
	require.ErrorIs(t, err, ErrInvalid)
	errs := f.Errs()
	require.Len(t, errs, 2)
	require.ErrorIs(t, errs[1], ErrInvalid)
}

func TestBufAPIAfterClose(t *testing.T) {
	e, err := New(Config{Devices: DevicesEmulated, EmulatedCount: 1, Emulator: EmulatorConfig{DRAMSize: 1 << 30}})
	require.NoError(t, err)
	h, err := e.Alloc(1<<20, Host)
	require.NoError(t, err)
	g, err := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	f := e.Copy(context.Background(), g.All(), h.All())
	bt := e.NewBatch()
	bt.Copy(h.All(), g.All())
	bf := bt.Submit(context.Background())
	require.NoError(t, e.Close())
	<-f.Done()
	<-bf.Done()
	t.Logf("f %v bf %v", f.Err(), bf.Err())
	_ = f.Errs()
	_ = bf.Errs()
	require.NoError(t, h.Free())
	require.NoError(t, g.Free())
	require.ErrorIs(t, e.CopySync(context.Background(), g.All(), h.All()), ErrClosed)
	bt.Copy(h.All(), g.All())
	require.ErrorIs(t, bt.Submit(context.Background()).Wait(context.Background()), ErrClosed)
	_, err = e.Alloc(10, Host)
	require.ErrorIs(t, err, ErrClosed)
	_, err = e.Register(make([]byte, 10))
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, e.Close())
}

// TestBufAPIRemap: memory deregistered, unmapped, mapped again at the same
// address with other content and registered again is read afresh by a
// device copy (no stale device mapping).
func TestBufAPIRemap(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 1})
	const n = 3 * 4096
	g, err := e.Alloc(n, Gaudi(0))
	require.NoError(t, err)
	out, err := e.Alloc(n, Host)
	require.NoError(t, err)
	var prev uintptr
	for i := 0; i < 4; i++ {
		mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		require.NoError(t, err)
		addr := uintptr(unsafe.Pointer(&mem[0]))
		t.Logf("round %d addr %#x same %v", i, addr, addr == prev)
		prev = addr
		fill(mem, uint64(i+1))
		b, err := e.Register(mem[5 : n-7])
		require.NoError(t, err)
		require.NoError(t, e.CopySync(context.Background(), g.Slice(0, n-12), b.All()))
		require.NoError(t, e.CopySync(context.Background(), out.Slice(0, n-12), g.Slice(0, n-12)))
		require.True(t, bytes.Equal(mem[5:n-7], out.Bytes()[:n-12]), "round %d", i)
		// and back into the registered memory
		fill(out.Bytes(), uint64(100+i))
		require.NoError(t, e.CopySync(context.Background(), g.Slice(0, n-12), out.Slice(0, n-12)))
		require.NoError(t, e.CopySync(context.Background(), b.All(), g.Slice(0, n-12)))
		require.True(t, bytes.Equal(mem[5:n-7], out.Bytes()[:n-12]), "round %d back", i)
		require.NoError(t, b.Deregister())
		require.NoError(t, unix.Munmap(mem))
	}
}

// TestBufAPISharedPage: two registered buffers in one page; freeing one
// does not disturb device copies of the other.
func TestBufAPISharedPage(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 1})
	mem := make([]byte, 16384)
	g, err := e.Alloc(16384, Gaudi(0))
	require.NoError(t, err)
	a, err := e.Register(mem[:100])
	require.NoError(t, err)
	b, err := e.Register(mem[100:8000])
	require.NoError(t, err)
	fill(mem, 9)
	require.NoError(t, e.CopySync(context.Background(), g.Slice(0, 100), a.All()))
	require.NoError(t, e.CopySync(context.Background(), g.Slice(100, 7900), b.All()))
	require.NoError(t, a.Free())
	want := append([]byte(nil), mem[100:8000]...)
	clear(mem)
	require.NoError(t, e.CopySync(context.Background(), b.All(), g.Slice(100, 7900)))
	require.Equal(t, want, mem[100:8000])
	c, err := e.Register(mem[:100])
	require.NoError(t, err)
	require.NoError(t, e.CopySync(context.Background(), c.All(), g.Slice(0, 100)))
	require.NotEqual(t, make([]byte, 100), mem[:100])
}
