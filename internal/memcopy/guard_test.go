//go:build linux

package memcopy

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// guarded maps a read-write region of pages with a PROT_NONE page on either
// side, so an access one byte outside it faults.
func guarded(t *testing.T, pages int) []byte {
	t.Helper()
	ps := unix.Getpagesize()
	m, err := unix.Mmap(-1, 0, (pages+2)*ps, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(m) })
	body := m[ps : (pages+1)*ps]
	require.NoError(t, unix.Mprotect(body, unix.PROT_READ|unix.PROT_WRITE))
	return body
}

// TestKernelsGuardPages copies with every kernel between slices placed
// flush against a PROT_NONE page, each one either ending just before the
// page after its mapping or starting just after the page before it, at
// every size 1..300 and a few larger ones (so at every alignment of the
// unaligned side): a kernel that reads or writes one byte outside the
// slices faults.
func TestKernelsGuardPages(t *testing.T) {
	cpu := detectCPU()
	var sizes []int
	for n := 1; n <= 300; n++ {
		sizes = append(sizes, n)
	}
	sizes = append(sizes, 511, 1000, 4095, 4097, 8191, 3*4096)
	src, dst := guarded(t, 3), guarded(t, 3)
	pattern(src, 0x3c)
	place := func(b []byte, n int, atEnd bool) []byte {
		if atEnd {
			return b[len(b)-n:]
		}
		return b[:n]
	}
	for _, k := range Kernels() {
		if !cpu.Has(k) {
			continue
		}
		for _, n := range sizes {
			for _, srcEnd := range []bool{true, false} {
				for _, dstEnd := range []bool{true, false} {
					s, d := place(src, n, srcEnd), place(dst, n, dstEnd)
					clear(dst)
					require.Equal(t, n, Run(k, cpu, d, s), "%s n=%d", k, n)
					require.True(t, bytes.Equal(d, s), "%s n=%d srcEnd=%v dstEnd=%v", k, n, srcEnd, dstEnd)
				}
			}
		}
	}
}
