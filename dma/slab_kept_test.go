package dma

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

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

// TestSlabFreeRefusedAfterUnmap: the driver unmapped a slab left empty
// but refused its FREE (EBUSY: the device stopped being operational
// between the two ioctls, hl_mem_ioctl). The slab was forgotten, its page
// allocated in the driver until the context closed; it is now kept,
// nothing carved from it again, and its FREE alone retried (here by the
// next carve, which finds no slab with room), its UNMAP never repeated.
func TestSlabFreeRefusedAfterUnmap(t *testing.T) {
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	m, err := d.AllocDevice(4096)
	require.NoError(t, err)
	h, va := m.Handle(), m.Addr()
	f.memErr = func(a *hlsys.MemArgs) error {
		if a.Op == hlsys.MemOpFree {
			return unix.EBUSY
		}
		return nil
	}
	require.NoError(t, m.Free(), "the buffer is freed whatever its slab's release gives")
	f.memErr = nil
	require.Equal(t, 1, d.SlabCount(), "the slab whose FREE was refused is kept")

	m2, err := d.AllocDevice(4096)
	require.NoError(t, err)
	require.NotEqual(t, h, m2.Handle(), "nothing is carved from an unmapped slab")
	require.NoError(t, d.Close())
	var frees, unmaps int
	for _, a := range f.memOps() {
		switch {
		case a.Op == hlsys.MemOpFree && a.U[0] == h:
			frees++
		case a.Op == hlsys.MemOpUnmap && a.U[0] == va:
			unmaps++
		}
	}
	require.Equal(t, 2, frees, "the refused FREE is retried")
	require.Equal(t, 1, unmaps, "the slab is unmapped once")
	require.Zero(t, d.SlabCount())
}
