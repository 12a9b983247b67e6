package hlsim

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestRulesMunmapAcrossMappings (B10): munmap(2) of a range that is only
// partly a mapping, or that spans two mappings, unmaps what of them lies
// in the range and answers 0 (torvalds/linux mm/vma.c: do_vmi_munmap
// finds the first vma overlapping [start, end) with vma_find;
// do_vmi_align_munmap -> vms_gather_munmap_vmas splits the first vma at
// start and the last at end (__split_vma) and detaches every vma between,
// each then closed: hl_mmap_mem_buf_vm_close, hw_block_vm_close). Pages of
// the range that are no mapping of the device are left alone here (the
// test's own pages next to the device's mappings stand for them: in a
// real process munmap(2) would unmap them too, and they may be Go memory).
// Two device mappings side by side are the kernel's placement: the test
// maps pairs until it gets one (bounded; skipped otherwise).
func TestRulesMunmapAcrossMappings(t *testing.T) {
	tests := []struct {
		name     string
		maps     [2]string // the device mappings, lower first ("" none)
		before   bool      // a page of the test's own just below them
		after    bool      // and just above them
		from, to int       // the Munmap range, in pages from the first page (before's included)
	}{
		{"past the end of a mapping", [2]string{cb2}, false, true, 1, 3},
		{"before the start of a mapping", [2]string{cb2}, true, false, 0, 2},
		{"a whole mapping and the pages around it", [2]string{cb2}, true, true, 0, 4},
		{"a block mapping and the page past it", [2]string{block}, false, true, 0, 2},
		{"the end of one mapping and the start of the next", [2]string{cb2, cb2}, false, false, 1, 3},
		{"two whole mappings", [2]string{cb2, cb2}, false, false, 0, 4},
		{"two mappings and the page past them", [2]string{cb2, cb2}, false, true, 0, 5},
		{"a CB mapping's end and a block mapping", [2]string{cb2, block}, false, false, 1, 3},
		{"a block mapping and a CB mapping's start", [2]string{block, cb2}, false, false, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, Config{Model: ModelGaudi3})
			lay := r.layOut(t, tt.maps, tt.before, tt.after)
			for p, pg := range lay.pages {
				pg[0] = byte(p + 1)
			}
			before := r.d.Stats().UserMappings
			span := unsafe.Slice(&lay.pages[tt.from][0], (tt.to-tt.from)*pageSize)
			require.NoError(t, r.b.Munmap(span))
			left := map[int]bool{} // device mappings with a page left
			for p, pg := range lay.pages {
				in := tt.from <= p && p < tt.to
				switch m := lay.mapOf[p]; {
				case m < 0:
					require.NoError(t, touch(&pg[0]), "page %d is not the device's: left alone", p)
					require.Equal(t, byte(p+1), pg[0])
				case in:
					require.Error(t, touch(&pg[0]), "page %d was in the range", p)
				default:
					require.NoError(t, touch(&pg[0]), "page %d was not in the range", p)
					require.Equal(t, byte(p+1), pg[0])
					left[m] = true
				}
			}
			require.Equal(t, before-int64(len(lay.maps)-len(left)), r.d.Stats().UserMappings)
			for m, h := range lay.cbs {
				if h == 0 {
					continue
				}
				_, err := r.b.Mmap(int64(h), 2*pageSize)
				if left[m] {
					require.ErrorIs(t, err, unix.EINVAL, "mapping %d keeps its CB mapped", m)
				} else {
					require.NoError(t, err, "mapping %d unmapped whole: the CB can be mapped again", m)
				}
			}
		})
	}
}

// The kinds of device mappings layOut makes.
const (
	cb2   = "a 2-page CB"
	block = "a CH_A block"
)

// layout is device mappings side by side in ascending order, with the
// test's own pages around them.
type layout struct {
	pages [][]byte // every page, ascending
	mapOf []int    // the device mapping of each page (-1: the test's own)
	maps  [][]byte // the device mappings, ascending
	cbs   []uint64 // the CB handle of each device mapping (0: a block)
}

// layOut maps kinds (cb2, block; "" for none) side
// by side, lower first, and a page of the test's own below and above
// them if asked. The kernel hands out addresses top-down, each new
// mapping just below the lowest: the CBs and the register file are made
// first (the emulator's own memory), then the page above, the higher
// mapping, the lower one and the page below. A hole left by an earlier
// mapping, or another mapping (the Go runtime's), can come in between:
// then it tries again, the mappings of the failed try left in place to
// fill such holes (bounded; skipped).
func (r *rig) layOut(t *testing.T, kinds [2]string, below, above bool) *layout {
	t.Helper()
	n := 1
	if kinds[1] != "" {
		n = 2
	}
	for range 64 {
		var hs [2]uint64
		for i, k := range kinds[:n] {
			if k == cb2 {
				h, err := hlsys.CBCreate(r.b, 2*pageSize, 0)
				require.NoError(t, err)
				hs[i] = h
			}
		}
		addr, err := gaudi3.ChAMapAddr(1)
		require.NoError(t, err)
		bh, size, err := hlsys.MemMapBlock(r.b, addr)
		require.NoError(t, err)
		var own [][]byte
		ownPage := func(at unsafe.Pointer, flags int) []byte {
			p, err := unix.MmapPtr(-1, 0, at, pageSize, unix.PROT_READ|unix.PROT_WRITE,
				unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|flags)
			if err != nil {
				return nil
			}
			pg := unsafe.Slice((*byte)(p), pageSize)
			own = append(own, pg)
			return pg
		}
		var top []byte
		if above {
			top = ownPage(nil, 0)
			require.NotNil(t, top)
		}
		maps := make([][]byte, n)
		for i := n - 1; i >= 0; i-- {
			if hs[i] != 0 {
				maps[i], err = r.b.Mmap(int64(hs[i]), 2*pageSize)
			} else {
				maps[i], err = r.b.Mmap(int64(bh), int(size))
			}
			require.NoError(t, err)
		}
		var bottom []byte
		if below {
			bottom = ownPage(unsafe.Add(unsafe.Pointer(&maps[0][0]), -pageSize), unix.MAP_FIXED_NOREPLACE)
		}
		side := func(lo, hi []byte) bool {
			return lo != nil && hi != nil && unsafe.Add(unsafe.Pointer(&lo[0]), len(lo)) == unsafe.Pointer(&hi[0])
		}
		ok := (!below || side(bottom, maps[0])) && (!above || side(maps[n-1], top)) && (n == 1 || side(maps[0], maps[1]))
		for _, pg := range own {
			t.Cleanup(func() { _ = unix.MunmapPtr(unsafe.Pointer(&pg[0]), pageSize) })
		}
		if !ok {
			// Left mapped (the context's Close undoes the device's), so
			// that the next try does not land in the same holes.
			continue
		}
		lay := &layout{maps: maps, cbs: hs[:n]}
		if below {
			lay.pages, lay.mapOf = append(lay.pages, bottom), append(lay.mapOf, -1)
		}
		for i, m := range maps {
			for off := 0; off < len(m); off += pageSize {
				lay.pages, lay.mapOf = append(lay.pages, m[off:off+pageSize]), append(lay.mapOf, i)
			}
		}
		if above {
			lay.pages, lay.mapOf = append(lay.pages, top), append(lay.mapOf, -1)
		}
		return lay
	}
	t.Skip("the kernel placed the mappings apart in 64 tries")
	return nil
}
