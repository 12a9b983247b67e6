package dma

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// gaudi2Page is Gaudi2's DRAM page with six HBMs:
// GAUDI2_COMPENSATE_TLB_PAGE_SIZE_FACTOR (16) x num_functional_hbms x
// 8 MiB (gaudi2_set_dram_properties), and the ALLOC page too.
const gaudi2Page = 16 * 6 * 8 << 20

// openSlabSim opens a Device on an emulated Gaudi2 with cfg (Model set here).
func openSlabSim(t *testing.T, cfg hlsim.Config) (*Device, *hlsim.Device) {
	t.Helper()
	cfg.Model = hlsim.ModelGaudi2
	sim, err := hlsim.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d, sim
}

// slabRoundTrip copies data to m and back through host memory and checks it.
func slabRoundTrip(t *testing.T, d *Device, m *DeviceMem, data []byte) {
	t.Helper()
	n := uint64(len(data))
	host, err := AllocHostPages(2 * n)
	require.NoError(t, err)
	defer func() { require.NoError(t, FreeHostPages(host)) }()
	hm, err := d.MapHostBytes(host)
	require.NoError(t, err)
	defer func() { require.NoError(t, hm.Unmap()) }()
	copy(host, data)
	require.NoError(t, d.CopySync(m.Addr(), hm.DeviceAddr(), n))
	require.NoError(t, d.CopySync(hm.DeviceAddr()+n, m.Addr(), n))
	require.True(t, bytes.Equal(data, host[n:]), "device memory at %#x", m.Addr())
}

// TestSlabManySmallBuffers: with the driver's Gaudi2 geometry (768 MiB
// pages, 96 GiB) a thousand 64 KiB buffers fit in one page. Each used to
// take an ALLOC of its own, rounded up to a whole page: the 128th failed
// with ENOMEM, 96 GiB spent on 8 MiB.
func TestSlabManySmallBuffers(t *testing.T) {
	d, _ := openSlabSim(t, hlsim.Config{DRAMPageSize: gaudi2Page, DRAMSize: 96 << 30})
	before, err := d.DramUsage()
	require.NoError(t, err)
	const n, size = 1000, 64 << 10
	mems := make([]*DeviceMem, 0, n)
	seen := map[uint64]bool{}
	for i := range n {
		m, err := d.AllocDevice(size)
		require.NoError(t, err, "buffer %d", i)
		require.Zero(t, m.Addr()%4096)
		require.Equal(t, uint64(size), m.AllocSize())
		require.False(t, seen[m.Addr()])
		seen[m.Addr()] = true
		mems = append(mems, m)
	}
	for i := 1; i < n; i++ { // carved in address order from one slab
		require.GreaterOrEqual(t, mems[i].Addr(), mems[i-1].Addr()+size)
	}
	require.Equal(t, 1, d.SlabCount())
	used, err := d.DramUsage()
	require.NoError(t, err)
	require.Equal(t, uint64(gaudi2Page), used.Used-before.Used, "one page for all of them")

	slabRoundTrip(t, d, mems[500], pattern(size))
	slabRoundTrip(t, d, mems[n-1], pattern(size))

	for _, m := range mems {
		require.NoError(t, m.Free())
	}
	require.Zero(t, d.SlabCount())
	after, err := d.DramUsage()
	require.NoError(t, err)
	require.Equal(t, before.Used, after.Used)
}

// TestSlabExportedRangeNotReused: a buffer carved from a slab is exported
// alone (the DMA-BUF covers its pages, not its neighbours'), and once
// freed its range is not handed out again while an importer may still
// hold the DMA-BUF: the driver keeps only the slab's mapping alive. The
// slab goes once the importer let go, before the device gives another.
func TestSlabExportedRangeNotReused(t *testing.T) {
	if b, err := os.ReadFile("/proc/sys/fs/leases-enable"); err == nil && strings.TrimSpace(string(b)) == "0" {
		t.Skip("fs.leases-enable=0: the emulator pins an export until its context closes")
	}
	d, sim := openSlabSim(t, hlsim.Config{DRAMSize: 64 << 20})
	before, err := d.DramUsage()
	require.NoError(t, err)
	const size = 64 << 10
	a, err := d.AllocDevice(size)
	require.NoError(t, err)
	b, err := d.AllocDevice(size)
	require.NoError(t, err)
	require.Equal(t, a.Addr()+size, b.Addr(), "neighbours in one slab")
	data := pattern(size)
	slabRoundTrip(t, d, b, data)

	x, err := d.ExportDMABuf(b, 0, size)
	require.NoError(t, err)
	view, err := sim.DMABufView(x.FD().Int())
	require.NoError(t, err)
	require.Equal(t, uint64(size), view.Size, "the export covers the buffer only")
	got := make([]byte, size)
	r, err := view.ReadAt(x.FD().Int(), got, x.Offset())
	require.NoError(t, err)
	require.Equal(t, size, r)
	require.True(t, bytes.Equal(data, got), "the importer reads the buffer's bytes")
	importer, err := x.FD().Dup()
	require.NoError(t, err)
	require.NoError(t, x.Close())

	require.NoError(t, b.Free(), "the buffer is freed; its range stays out of use")
	require.NotEqual(t, AddrDevice, d.AddrKind(b.Addr()))
	c, err := d.AllocDevice(size)
	require.NoError(t, err)
	require.NotEqual(t, b.Addr(), c.Addr(), "an exported range is not reused")
	require.NoError(t, a.Free())
	require.NoError(t, c.Free())
	require.Equal(t, 1, d.SlabCount(), "the importer holds the slab's mapping: UNMAP refused")

	require.NoError(t, importer.Close())
	// No room in the kept slab for this one: the slab is released first.
	big, err := d.AllocDevice(hlsim.DefaultDRAMPageSize - 4096)
	require.NoError(t, err)
	require.Equal(t, 1, d.SlabCount())
	used, err := d.DramUsage()
	require.NoError(t, err)
	require.Equal(t, uint64(hlsim.DefaultDRAMPageSize), used.Used-before.Used, "the old slab is gone")
	require.NoError(t, big.Free())
	require.Zero(t, d.SlabCount())
}

// TestSlabOnlyWhereExportsAreConfined: before 6.7 a DMA-BUF export starts
// at the allocation (6.3-6.6) or is the whole allocation (6.1), so a
// buffer sharing one would hand its neighbours to an importer: there
// every buffer keeps an allocation of its own.
func TestSlabOnlyWhereExportsAreConfined(t *testing.T) {
	for _, tc := range []struct {
		kernel string
		slab   bool
	}{{"6.1", false}, {"6.5", false}, {"6.8", true}} {
		t.Run(tc.kernel, func(t *testing.T) {
			d, _ := openSlabSim(t, hlsim.Config{DRAMSize: 64 << 20, Kernel: tc.kernel})
			m, err := d.AllocDevice(4096)
			require.NoError(t, err)
			if tc.slab {
				require.Equal(t, uint64(4096), m.AllocSize())
				require.Equal(t, 1, d.SlabCount())
			} else {
				require.Equal(t, uint64(hlsim.DefaultDRAMPageSize), m.AllocSize())
				require.Zero(t, d.SlabCount())
			}
			slabRoundTrip(t, d, m, pattern(4096))
			require.NoError(t, m.Free())
			require.Zero(t, d.SlabCount())
		})
	}
}
