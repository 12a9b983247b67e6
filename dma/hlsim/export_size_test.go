package hlsim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestRulesExportedSizePerAllocation (E7): on 6.3-6.6 the driver keeps
// one exported size per allocation (MEM66 export_dmabuf_from_addr:
// phys_pg_pack->exported_size = size, at every export), and an importer's
// map builds its scatter list from the allocation's first page up to that
// size (hl_map_dmabuf, alloc_sgt_from_device_pages: cur_size_to_export),
// not up to its own dma-buf's size: after a smaller export of the same
// allocation (by anyone in the context), a later map of an earlier,
// larger dma-buf reaches only the smaller size; a map made before keeps
// what it had. 6.7+ (MEMOOT) dropped the field: each dma-buf maps its own
// size. The emulator gave every dma-buf its own size on 6.3-6.6 too.
func TestRulesExportedSizePerAllocation(t *testing.T) {
	for _, kernel := range []string{"6.3", "6.6", "6.7", "6.8"} {
		fixed := kernel >= "6.7"
		t.Run(kernel, func(t *testing.T) {
			r := newRig(t, Config{Model: ModelGaudi2, Kernel: kernel, DRAMSize: 64 << 20})
			const n = 2 << 20
			h, err := hlsys.MemAlloc(r.b, n, 0, 0)
			require.NoError(t, err)
			addr, err := hlsys.MemMapDevice(r.b, h, 0, 0)
			require.NoError(t, err)

			big, err := hlsys.MemExportDMABuf(r.b, addr, n, 0)
			require.NoError(t, err)
			defer big.Close()
			before, err := r.d.DMABufView(big.Int()) // an importer that mapped it now
			require.NoError(t, err)
			require.EqualValues(t, n, before.Size)

			for _, size := range []uint64{8192, 1 << 20} {
				small, err := hlsys.MemExportDMABuf(r.b, addr, size, 0)
				require.NoError(t, err)
				after, err := r.d.DMABufView(big.Int()) // an importer that maps it now
				require.NoError(t, err)
				want := uint64(n)
				if !fixed {
					want = size // the last export's size
				}
				require.Equal(t, want, after.Size, "bytes a new importer of the %d-byte dma-buf reaches after a %d-byte export", n, size)
				_, err = after.ReadAt(big.Int(), make([]byte, 1), n-1)
				if fixed {
					require.NoError(t, err)
				} else {
					require.Error(t, err, "the last byte of the larger dma-buf is past what its importer maps")
				}
				v, err := r.d.DMABufView(small.Int())
				require.NoError(t, err)
				require.Equal(t, size, v.Size)
				require.NoError(t, small.Close())
			}
			require.EqualValues(t, n, before.Size, "a map made before the smaller export keeps its size")

			// A larger export after a smaller one: the dma-buf's own size
			// still bounds its importer.
			small, err := hlsys.MemExportDMABuf(r.b, addr, 8192, 0)
			require.NoError(t, err)
			defer small.Close()
			again, err := hlsys.MemExportDMABuf(r.b, addr, n, 0)
			require.NoError(t, err)
			defer again.Close()
			v, err := r.d.DMABufView(small.Int())
			require.NoError(t, err)
			require.EqualValues(t, 8192, v.Size)
		})
	}
}
