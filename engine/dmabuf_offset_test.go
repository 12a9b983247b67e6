package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/copier"
)

// TestDMABufOffsetBothKernelGenerations: a Gaudi buffer's DMA-BUF (what
// ibv_reg_dmabuf_mr and IPC peers get) on an emulated 6.5 kernel, whose
// driver ignores the export offset, and on 6.8: Offset is where the
// buffer's bytes are, and copier.DMABufOffset (used for the MR) refuses a DMA-BUF
// that does not cover the buffer instead of registering wrong bytes.
func TestDMABufOffsetBothKernelGenerations(t *testing.T) {
	for _, kernel := range []string{"6.5", "6.8"} {
		t.Run("kernel"+kernel, func(t *testing.T) {
			e := newEngine(t, Config{Emulator: EmulatorConfig{Kernel: kernel}})
			const n = 1 << 20
			src, err := e.Alloc(n, Host)
			require.NoError(t, err)
			fill(src.Bytes(), 3)
			g, err := e.Alloc(n, Gaudi(0))
			require.NoError(t, err)
			require.NoError(t, e.CopySync(context.Background(), g.All(), src.All()))

			x, err := g.ExportDMABuf()
			require.NoError(t, err)
			require.LessOrEqual(t, x.Offset()+n, x.Size())
			// Read it as an importer would (the emulated driver's view).
			view, err := e.cp.Devs[0].Sim.DMABufView(x.FD().Int())
			require.NoError(t, err)
			got := make([]byte, n)
			k, err := view.ReadAt(x.FD().Int(), got, x.Offset())
			require.NoError(t, err)
			require.Equal(t, n, k)
			require.True(t, bytes.Equal(src.Bytes(), got), "the DMA-BUF holds the buffer at Offset")
			x.Release()

			// A DMA-BUF of a later part of the allocation: on 6.5 it starts at
			// the allocation (offset carried) and covers all of it (every
			// export of an allocation has one size there: dma.ExportDMABuf),
			// so it holds the buffer too; on 6.8 it starts at the part.
			dev := e.cp.Devs[0].Dev
			part, err := dev.ExportDMABuf(g.dmem, 4096, 8192)
			require.NoError(t, err)
			off, err := copier.DMABufOffset(&g.m, part)
			if kernel == "6.5" {
				require.NoError(t, err)
				require.Zero(t, off)
				require.Zero(t, part.MemOffset())
				require.Equal(t, uint64(4096), part.Offset())
			} else {
				require.ErrorIs(t, err, ErrDevice, "a DMA-BUF that does not hold the whole buffer is refused")
				require.Equal(t, uint64(4096), part.MemOffset())
				require.Zero(t, part.Offset())
			}
			require.NoError(t, part.Close())
			require.NoError(t, g.Free())
			require.NoError(t, src.Free())
		})
	}
}
