package hlsim

import (
	"testing"

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
	h, err := hlsys.CBCreate(r.b, 3*pageSize, 0)
	require.NoError(t, err)
	m, err := r.b.Mmap(int64(h), 3*pageSize)
	require.NoError(t, err)
	m[0] = 7
	require.EqualValues(t, 1, r.d.Stats().UserMappings)

	require.ErrorIs(t, r.b.Munmap(m[100:pageSize]), unix.EINVAL, "start not page aligned")
	require.NoError(t, r.b.Munmap(m[pageSize:pageSize+10]), "the middle page (the length rounded up)")
	require.NoError(t, r.b.Munmap(m[pageSize:2*pageSize]), "unmapped again: no change")
	require.EqualValues(t, 1, r.d.Stats().UserMappings, "two pages are still mapped")
	_, err = r.b.Mmap(int64(h), 3*pageSize)
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
