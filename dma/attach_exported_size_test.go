package dma

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/lent"
)

// TestAttachLaterSmallerExport: on 6.3-6.6 the driver maps every
// importer of a dma-buf of an allocation up to the size of that
// allocation's last export (hlsim RULES.md E7), so when the runtime (or
// HCL, or NIXL exporting per tensor) exports a smaller range of the pool's
// allocation after Attach, a registration made afterwards near the end of
// gxfer's pool export reaches past what the importer maps: the limitation
// dma.Attach documents. On 6.7+ each dma-buf maps its own size.
func TestAttachLaterSmallerExport(t *testing.T) {
	for _, k := range []string{"6.5", "6.8"} {
		t.Run(k, func(t *testing.T) {
			sim, rt := newRuntime(t, attachCase{hlsim.ModelGaudi2, k, 0})
			an := rt.Anchor()
			at, err := Attach(rt.Target(), an, AttachOptions{})
			require.NoError(t, err)
			defer func() { require.NoError(t, at.Detach()) }()
			tail, err := at.Region(an.PoolStart+an.PoolLen-4096, 4096)
			require.NoError(t, err)
			view, err := sim.DMABufView(tail.FD)
			require.NoError(t, err)
			require.GreaterOrEqual(t, view.Size, tail.Offset+tail.Len, "registered before: the whole pool")

			// The runtime exports one page of its pool (its own ioctl on
			// the context it shares with gxfer).
			other, err := hlsys.MemExportDMABuf(lent.Backend(rt.Target()), an.MapVA, 4096, 0)
			require.NoError(t, err)
			defer other.Close()

			view, err = sim.DMABufView(tail.FD)
			require.NoError(t, err)
			if k == "6.5" {
				require.Less(t, view.Size, tail.Offset+tail.Len, "6.3-6.6: an importer mapping gxfer's dma-buf now reaches only the runtime's last export size")
			} else {
				require.GreaterOrEqual(t, view.Size, tail.Offset+tail.Len)
			}
		})
	}
}
