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

// TestSlabFailedExportRangeReused: an export the driver refused (here
// EBUSY, the device not operational) gave no importer the buffer's
// pages, so the buffer's range is reused once it is freed, as that of a
// buffer never exported. It stayed out of use until its slab went, as if
// an importer might hold it.
func TestSlabFailedExportRangeReused(t *testing.T) {
	d, sim := openSlabSim(t, hlsim.Config{DRAMSize: 64 << 20})
	keep, err := d.AllocDevice(4096) // keeps the slab
	require.NoError(t, err)
	m, err := d.AllocDevice(4096)
	require.NoError(t, err)
	sim.ForceStatus(hlsys.DeviceStatusNeedsReset)
	_, err = d.ExportDMABuf(m, 0, 4096)
	sim.ForceStatus(hlsys.DeviceStatusOperational)
	require.Error(t, err, "the driver refused the export")
	require.NoError(t, m.Free())
	again, err := d.AllocDevice(4096)
	require.NoError(t, err)
	require.Equal(t, m.Addr(), again.Addr(), "no DMA-BUF of the range was made: it is reused")
	require.NoError(t, again.Free())
	require.NoError(t, keep.Free())
}
