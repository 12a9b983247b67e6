package hlsim

import (
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestCopyIn checks copy_from_user's contract on readable memory, holes,
// inaccessible pages and bad ranges, and that the goroutine's fault
// setting is left as it was.
func TestCopyIn(t *testing.T) {
	page := unix.Getpagesize()
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(3*page), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	m := unsafe.Slice((*byte)(p), 3*page)
	t.Cleanup(func() { _ = unix.MunmapPtr(p, uintptr(2*page)) })
	for i := range page {
		m[i] = byte(i)
	}
	base := uint64(uintptr(p))
	require.NoError(t, unix.Mprotect(m[page:2*page], unix.PROT_NONE))
	require.NoError(t, unix.MunmapPtr(unsafe.Pointer(&m[2*page]), uintptr(page)))
	src := []byte("a chunk array of the caller")
	cases := []struct {
		name string
		addr uint64
		n    int
		want []byte // nil: EFAULT
	}{
		{"Go memory", uint64(uintptr(unsafe.Pointer(&src[0]))), len(src), src},
		{"mapped page", base + 8, 16, m[8:24]},
		{"last bytes of a mapped page", base + uint64(page) - 8, 8, m[page-8 : page]},
		{"into an inaccessible page", base + uint64(page) - 8, 16, nil},
		{"inaccessible page", base + uint64(page), 8, nil},
		{"unmapped page", base + 2*uint64(page), 8, nil},
		{"null", 0, 8, nil},
		{"first page", 0x10, 8, nil},
		{"end of the first page", 0xff8, 8, nil},
		{"wraps around", ^uint64(0) - 3, 8, nil},
		{"empty", 0, 0, []byte{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]byte, tc.n)
			err := copyIn(dst, tc.addr)
			if tc.want == nil {
				require.ErrorIs(t, err, unix.EFAULT)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, dst)
		})
	}
	t.Run("fault setting kept", func(t *testing.T) {
		for _, before := range []bool{false, true} {
			debug.SetPanicOnFault(before)
			require.ErrorIs(t, copyIn(make([]byte, 8), base+uint64(page)), unix.EFAULT)
			require.Equal(t, before, debug.SetPanicOnFault(false))
		}
	})
	t.Run("other panics go on", func(t *testing.T) {
		require.PanicsWithValue(t, "not a fault", func() { _ = faultSafe(func() { panic("not a fault") }) })
	})
}
