package dma

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// TestExportSubRangesOfOneAllocation: on 6.3-6.6 the driver maps every
// importer of any dma-buf of an allocation up to the size of that
// allocation's last export (hlsim RULES.md E7). ExportDMABuf exported
// there from the allocation's start to the end of the wanted range, so a
// second export of a range nearer the start (a smaller size) cut the first
// DMA-BUF short for every importer that registered it afterwards: an RDMA
// MR of the first range then failed or mapped other bytes. Each export of
// a Gaudi2 allocation now covers the whole allocation there (one size for
// all); 6.7+ maps each dma-buf's own size.
func TestExportSubRangesOfOneAllocation(t *testing.T) {
	for _, kernel := range []string{"6.5", "6.8"} {
		t.Run(kernel, func(t *testing.T) {
			sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 64 << 20, Kernel: kernel})
			require.NoError(t, err)
			defer func() { require.NoError(t, sim.Close()) }()
			d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()

			const n = 1 << 20
			m, err := d.AllocDevice(n)
			require.NoError(t, err)
			host, err := AllocHostPages(n)
			require.NoError(t, err)
			defer func() { require.NoError(t, FreeHostPages(host)) }()
			hm, err := d.MapHostBytes(host)
			require.NoError(t, err)
			data := pattern(n)
			copy(host, data)
			require.NoError(t, d.CopySync(m.Addr(), hm.DeviceAddr(), n))
			require.NoError(t, hm.Unmap())

			const off, size = 512 << 10, 8192
			far, err := d.ExportDMABuf(m, off, size)
			require.NoError(t, err)
			defer func() { require.NoError(t, far.Close()) }()
			near, err := d.ExportDMABuf(m, 0, 4096) // a second, nearer range
			require.NoError(t, err)
			defer func() { require.NoError(t, near.Close()) }()

			for _, b := range []*DMABuf{far, near} {
				// An importer registering the DMA-BUF now.
				view, err := sim.DMABufView(b.FD().Int())
				require.NoError(t, err)
				got := make([]byte, b.Len())
				k, err := view.ReadAt(b.FD().Int(), got, b.Offset())
				require.NoError(t, err, "the importer cannot reach [%d, +%d) of a %d-byte DMA-BUF", b.Offset(), b.Len(), b.Size())
				require.Equal(t, len(got), k)
				at := b.MemOffset() + b.Offset()
				require.True(t, bytes.Equal(data[at:at+b.Len()], got), "the importer reads the wanted bytes at Offset")
			}
		})
	}
}
