package hlsim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// sinkByte keeps touch's read from being dropped.
var sinkByte byte

// touch reads *p, reporting EFAULT where the read faults (as a read of an
// unmapped page faults with SIGSEGV in a real process).
func touch(p *byte) error {
	return faultSafe(func() { sinkByte = *p })
}

// TestRulesPartialMunmapFaults (B10): the pages a partial munmap removes
// from a CB mapping are gone from the process: a touch faults, as it does
// on hardware, while the pages left stay usable and the CB itself (the
// driver's memory, not the user's mapping) keeps its bytes for the next
// mmap. Once the whole mapping is unmapped, a touch of any of it faults.
func TestRulesPartialMunmapFaults(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2})
	h, m := r.mappedCB(t, 3)
	m[0], m[pageSize], m[2*pageSize] = 1, 2, 3
	require.NoError(t, r.b.Munmap(m[pageSize:2*pageSize]))
	require.Error(t, touch(&m[pageSize]), "the page unmapped")
	require.NoError(t, touch(&m[0]))
	require.NoError(t, touch(&m[2*pageSize]))
	m[2*pageSize+1] = 4

	require.NoError(t, r.b.Munmap(m[:pageSize]))
	require.NoError(t, r.b.Munmap(m[2*pageSize:]))
	for _, off := range []int{0, pageSize, 2 * pageSize} {
		require.Error(t, touch(&m[off]), "offset %d after the whole mapping went", off)
	}
	m, err := r.b.Mmap(int64(h), 3*pageSize)
	require.NoError(t, err)
	require.Equal(t, []byte{1, 2, 3, 4}, []byte{m[0], m[pageSize], m[2*pageSize], m[2*pageSize+1]},
		"the CB kept its bytes")
	require.NoError(t, r.b.Munmap(m))
}

// TestRulesBlockMunmapFaults (B10, G3): the user's mapping of a Gaudi3
// CH_A block is a mapping of its own of the device's registers
// (hl_hw_block_mmap: the ASIC's hw_block_mmap remaps the block's BAR
// page into the process, one vma per mmap, each with its own
// hl_vm_hw_block_list_node and context reference), so once it is
// unmapped a touch of it faults, while the registers (the emulator's
// register file) keep their values and a second mapping of the block
// still reads them, takes the user's stores and drives the channel, its
// Doorbell included. Until 2026-11-30 every mmap of a block returned
// the emulator's register file itself, which stayed readable after its
// munmap.
func TestRulesBlockMunmapFaults(t *testing.T) {
	r := newG3Rig(t, Config{}, 1)
	g := r.channel()
	require.Equal(t, uint32(g3TestRing-1), g.load(gaudi3.RegMSQSize), "a store through the mapping reached the register")
	addr, err := gaudi3.ChAMapAddr(r.ch)
	require.NoError(t, err)
	h, size, err := hlsys.MemMapBlock(r.b, addr)
	require.NoError(t, err)
	second, err := r.b.Mmap(int64(h), int(size))
	require.NoError(t, err)
	before := r.d.Stats().UserMappings

	first := r.regs
	require.NoError(t, r.b.Munmap(first))
	require.Error(t, touch(&first[0]), "the block's page unmapped")
	require.Equal(t, before-1, r.d.Stats().UserMappings)
	require.Equal(t, uint32(g3TestRing-1), g.load(gaudi3.RegMSQSize), "the registers keep their values")

	r.regs = second
	require.Equal(t, uint32(g3TestRing-1), r.rd(gaudi3.RegMSQSize), "the other mapping reads the registers")
	_, srcVA := r.host(pageSize)
	dev := r.dram(pageSize)
	r.post(r.lin(dev, srcVA, pageSize, gaudi3.DirHostToDevice))
	out, err := r.wait(1)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status, "the channel runs through the other mapping")
	require.Equal(t, r.pi, g.load(gaudi3.RegMSQCI))

	require.NoError(t, r.b.Munmap(second))
	require.Error(t, touch(&second[0]), "the other mapping unmapped")
	require.Equal(t, before-2, r.d.Stats().UserMappings)
	require.Equal(t, r.pi, g.load(gaudi3.RegMSQCI), "the registers outlive the user's mappings")
}
