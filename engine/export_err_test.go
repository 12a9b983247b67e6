package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma"
)

// TestExportErrorTyped: every error the engine returns matches one
// of the Err* kinds. A DMA-BUF export the device refuses (here: the
// device reports MALFUNCTION) comes back from Buffer.ExportDMABuf as a
// bare fmt.Errorf around the memcache/dma errors, matching none of them,
// while the same failure of a host mapping (a copy) is ErrDevice.
func TestExportErrorTyped(t *testing.T) {
	e := newEngine(t, Config{})
	d, err := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	h, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	e.cp.Devs[0].Sim.ForceStatus(uint32(dma.StatusMalfunction))
	defer e.cp.Devs[0].Sim.ForceStatus(uint32(dma.StatusOperational))

	cerr := e.CopySync(context.Background(), d.Slice(0, 4096), h.All())
	require.ErrorIs(t, cerr, ErrDevice, "copy: %v", cerr)

	x, err := d.ExportDMABuf()
	require.Error(t, err)
	require.Nil(t, x)
	require.ErrorIs(t, err, ErrDevice, "export: %v", err)
}
