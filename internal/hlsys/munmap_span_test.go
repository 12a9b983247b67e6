package hlsys_test

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestFDBackendMunmapAcrossMappings: munmap(2) of a range that is only
// partly a mapping, or that spans two mappings, unmaps what of them lies
// in the range and answers 0 (torvalds/linux mm/vma.c: do_vmi_munmap
// finds the first vma overlapping [start, end) with vma_find;
// do_vmi_align_munmap -> vms_gather_munmap_vmas splits the first vma at
// start and the last at end and detaches every vma between), and so does
// Munmap, as the emulator does (dma/hlsim RULES.md B10). Pages of the
// range that are no mapping of the node are left alone (the test's own
// pages next to the node's mappings stand for them: munmap(2) would unmap
// them too, and in a Go process they may be the runtime's memory). Close
// then unmaps exactly what is left of the node's mappings. A regular file
// stands in for the device node.
func TestFDBackendMunmapAcrossMappings(t *testing.T) {
	tests := []struct {
		name         string
		two          bool // two mappings of 2 pages side by side, else one
		below, above bool // a page of the test's own just below, above them
		from, to     int  // the Munmap range, in pages from the first page (below's included)
	}{
		{name: "past the end of a mapping", above: true, from: 1, to: 3},
		{name: "before the start of a mapping", below: true, from: 0, to: 2},
		{name: "a whole mapping and the pages around it", below: true, above: true, from: 0, to: 4},
		{name: "the end of one mapping and the start of the next", two: true, from: 1, to: 3},
		{name: "two whole mappings", two: true, from: 0, to: 4},
		{name: "two mappings and the pages around them", two: true, below: true, above: true, from: 0, to: 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node")
			require.NoError(t, os.WriteFile(path, make([]byte, 2*os.Getpagesize()), 0o600))
			b, err := hlsys.OpenFD(path)
			require.NoError(t, err)
			pages, mapOf := fdLayOut(t, b, tt.two, tt.below, tt.above)
			span := unsafe.Slice(&pages[tt.from][0], (tt.to-tt.from)*os.Getpagesize())
			require.NoError(t, b.Munmap(span))
			for p, pg := range pages {
				in := tt.from <= p && p < tt.to
				switch {
				case mapOf[p] < 0:
					require.True(t, mapped(pg), "page %d is not the node's: left alone", p)
				case in:
					require.False(t, mapped(pg), "page %d was in the range", p)
				default:
					require.True(t, mapped(pg), "page %d was not in the range", p)
				}
			}
			require.NoError(t, b.Close())
			require.False(t, fileMapped(t, path), "Close left part of a mapping mapped")
			for p, pg := range pages {
				if mapOf[p] < 0 {
					require.True(t, mapped(pg), "Close unmapped page %d, not the node's", p)
				}
			}
		})
	}
}

// fdLayOut maps one or two 2-page mappings of b side by side and a page
// of the test's own below and above them if asked, and returns every
// page, ascending, with the mapping each belongs to (-1: the test's
// own). The kernel hands out addresses top-down, each new mapping just
// below the lowest: the page above is mapped first, then the higher
// mapping, the lower one and the page below. A hole left by an earlier
// mapping, or another mapping (the Go runtime's), can come in between:
// then it tries again, the mappings of the failed try left in place to
// fill such holes (Close unmaps the node's; bounded, skipped).
func fdLayOut(t *testing.T, b *hlsys.FDBackend, two, below, above bool) ([][]byte, []int) {
	t.Helper()
	ps := os.Getpagesize()
	n := 1
	if two {
		n = 2
	}
	own := func(at unsafe.Pointer, flags int) []byte {
		p, err := unix.MmapPtr(-1, 0, at, uintptr(ps), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|flags)
		if err != nil {
			return nil
		}
		t.Cleanup(func() { _ = unix.MunmapPtr(p, uintptr(ps)) })
		return unsafe.Slice((*byte)(p), ps)
	}
	side := func(lo, hi []byte) bool {
		return lo != nil && hi != nil && unsafe.Add(unsafe.Pointer(&lo[0]), len(lo)) == unsafe.Pointer(&hi[0])
	}
	for range 64 {
		var top, bottom []byte
		if above {
			top = own(nil, 0)
			require.NotNil(t, top)
		}
		maps := make([][]byte, n)
		for i := n - 1; i >= 0; i-- {
			m, err := b.Mmap(0, 2*ps)
			require.NoError(t, err)
			maps[i] = m
		}
		if below {
			bottom = own(unsafe.Add(unsafe.Pointer(&maps[0][0]), -ps), unix.MAP_FIXED_NOREPLACE)
		}
		if (below && !side(bottom, maps[0])) || (above && !side(maps[n-1], top)) || (n == 2 && !side(maps[0], maps[1])) {
			continue
		}
		var pages [][]byte
		var mapOf []int
		if below {
			pages, mapOf = append(pages, bottom), append(mapOf, -1)
		}
		for i, m := range maps {
			for off := 0; off < len(m); off += ps {
				pages, mapOf = append(pages, m[off:off+ps]), append(mapOf, i)
			}
		}
		if above {
			pages, mapOf = append(pages, top), append(mapOf, -1)
		}
		return pages, mapOf
	}
	t.Skip("the kernel placed the mappings apart in 64 tries")
	return nil, nil
}

// TestFDBackendMunmapOverMappingInHole: a range over an older mapping
// whose hole (a partial Munmap) a newer mapping took spans both, so
// munmap(2) unmaps both (vms_gather_munmap_vmas detaches every vma in
// the range); Munmap unmapped only the older one's pages and left the
// newer mapping mapped, its CB or block referenced in the driver until
// Close. The test maps pages until the kernel hands out the hole
// (bounded; skipped otherwise).
func TestFDBackendMunmapOverMappingInHole(t *testing.T) {
	b, old, inHole := mappingInHole(t)
	ps := os.Getpagesize()
	require.NoError(t, b.Munmap(old))
	require.False(t, mapped(old[:ps]) || mapped(old[2*ps:]), "the older mapping's pages")
	require.False(t, mapped(inHole), "the mapping in the hole is in the range too")
}
