package hlsim

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestRulesPartialMunmap (B10): munmap of part of a CB mapping is
// accepted. munmap splits the vma (the driver's vm_ops have no may_split)
// and closes the piece it removes; hl_mmap_mem_buf_vm_close subtracts the
// piece's size from the buffer's real_mapped_size and drops the mapping's
// reference only when the pieces add up to the whole (MM). Until then the
// CB stays mapped: a second mmap is EINVAL ("already mapped to user") and
// after DESTROY its handle still resolves. As munmap(2) takes it, the
// start must be page aligned (EINVAL) and the length is rounded up to
// pages; a piece unmapped again changes nothing.
func TestRulesPartialMunmap(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2})
	h, m := r.mappedCB(t, 3)
	m[0] = 7
	require.EqualValues(t, 1, r.d.Stats().UserMappings)

	require.ErrorIs(t, r.b.Munmap(m[100:pageSize]), unix.EINVAL, "start not page aligned")
	require.NoError(t, r.b.Munmap(m[pageSize:pageSize+10]), "the middle page (the length rounded up)")
	require.NoError(t, r.b.Munmap(m[pageSize:2*pageSize]), "unmapped again: no change")
	require.EqualValues(t, 1, r.d.Stats().UserMappings, "two pages are still mapped")
	_, err := r.b.Mmap(int64(h), 3*pageSize)
	require.ErrorIs(t, err, unix.EINVAL, "still mapped to the user")
	require.NoError(t, r.b.Munmap(m[:pageSize]))

	require.NoError(t, hlsys.CBDestroy(r.b, h))
	a := hlsys.CBArgs{Handle: h, Op: hlsys.CBOpInfo}
	require.NoError(t, hlsys.CommandBuffer(r.b, &a), "the last page's mapping holds the CB")
	require.NoError(t, r.b.Munmap(m[2*pageSize:]))
	require.Zero(t, r.d.Stats().UserMappings)
	a = hlsys.CBArgs{Handle: h, Op: hlsys.CBOpInfo}
	require.ErrorIs(t, hlsys.CommandBuffer(r.b, &a), unix.EINVAL, "the last piece dropped the last reference")

	// A one-page CB goes whole with part of its page; it can then be
	// mapped again, its contents kept.
	h, err = hlsys.CBCreate(r.b, pageSize, 0)
	require.NoError(t, err)
	m, err = r.b.Mmap(int64(h), pageSize)
	require.NoError(t, err)
	m[1] = 9
	require.NoError(t, r.b.Munmap(m[:100]))
	require.Zero(t, r.d.Stats().UserMappings)
	m, err = r.b.Mmap(int64(h), pageSize)
	require.NoError(t, err, "the munmap ended the mapping")
	require.Equal(t, byte(9), m[1])
	require.NoError(t, r.b.Munmap(m))
}

// TestRulesPartialMunmapBlock (B10): a Gaudi3 CH_A block is one page, so
// a munmap of any part of it, from its start, takes the whole mapping
// (hw_block_vm_close: mapped_size reaches 0, the context reference is
// put; MEM66); a start inside the page is EINVAL.
func TestRulesPartialMunmapBlock(t *testing.T) {
	require.Equal(t, pageSize, gaudi3.ChASize)
	r := newG3Rig(t, Config{}, 1)
	before := r.d.Stats().UserMappings
	require.ErrorIs(t, r.b.Munmap(r.regs[8:16]), unix.EINVAL, "start not page aligned")
	require.NoError(t, r.b.Munmap(r.regs[:8]))
	require.Equal(t, before-1, r.d.Stats().UserMappings)
}

// TestRulesMunmapNothingMapped (B10): munmap(2) of a range with no
// mapping in it succeeds; only a start not page aligned or a length of 0
// is EINVAL (torvalds/linux mm/vma.c do_vmi_munmap: vma_find finds no
// vma, return 0). A CB mapping unmapped already, a piece of one unmapped
// twice and memory that was never a mapping of the device all answer 0,
// and nothing is unmapped.
func TestRulesMunmapNothingMapped(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2})
	h, m := r.mappedCB(t, 2)
	other := make([]byte, 2*pageSize)
	aligned := other[pageSize-int(uintptr(unsafe.Pointer(&other[0]))%pageSize):][:pageSize]
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"never mapped", aligned, nil},
		{"never mapped, start not page aligned", aligned[8:], unix.EINVAL},
		{"length 0", m[:0], unix.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == nil {
				require.NoError(t, r.b.Munmap(tt.b))
			} else {
				require.ErrorIs(t, r.b.Munmap(tt.b), tt.want)
			}
			require.EqualValues(t, 1, r.d.Stats().UserMappings, "the CB mapping stays")
		})
	}
	require.NoError(t, r.b.Munmap(m[pageSize:]))
	require.NoError(t, r.b.Munmap(m[pageSize:]), "a piece unmapped again")
	require.NoError(t, r.b.Munmap(m[:pageSize]))
	require.Zero(t, r.d.Stats().UserMappings)
	require.NoError(t, r.b.Munmap(m), "the whole mapping unmapped again")
	require.NoError(t, r.b.Munmap(m[pageSize:]), "a piece of it unmapped again")
	require.ErrorIs(t, r.b.Munmap(m[8:]), unix.EINVAL, "start not page aligned")
	_, err := r.b.Mmap(int64(h), 2*pageSize)
	require.NoError(t, err, "the CB can be mapped again")
}

// mappedCB creates a kernel CB of pages pages and mmaps it whole.
func (r *rig) mappedCB(t *testing.T, pages int) (uint64, []byte) {
	t.Helper()
	h, err := hlsys.CBCreate(r.b, uint32(pages*pageSize), 0)
	require.NoError(t, err)
	m, err := r.b.Mmap(int64(h), pages*pageSize)
	require.NoError(t, err)
	return h, m
}
