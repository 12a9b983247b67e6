package dma

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestSlabKeptGivesWayToWholePage: a slab left empty whose UNMAP the
// driver refused (here: the device not operational, EBUSY from
// hl_mem_ioctl) keeps its page for a later release. An AllocDevice of a
// whole page must release it first, as a small one does, rather than
// fail with ENOMEM while no buffer uses the page.
func TestSlabKeptGivesWayToWholePage(t *testing.T) {
	d, sim := openSlabSim(t, hlsim.Config{DRAMSize: hlsim.DefaultDRAMPageSize})
	m, err := d.AllocDevice(4096)
	require.NoError(t, err)
	require.Equal(t, 1, d.SlabCount())
	sim.ForceStatus(hlsys.DeviceStatusNeedsReset)
	require.NoError(t, m.Free(), "the buffer is freed; its slab is kept")
	sim.ForceStatus(hlsys.DeviceStatusOperational)
	require.Equal(t, 1, d.SlabCount(), "the refused UNMAP kept the slab")

	big, err := d.AllocDevice(hlsim.DefaultDRAMPageSize)
	require.NoError(t, err, "the empty slab's page is the device's only one")
	require.Zero(t, d.SlabCount())
	require.NoError(t, big.Free())
}
