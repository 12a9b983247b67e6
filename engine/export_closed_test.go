package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExportDMABufAfterClose: once the engine's Close has begun, a Gaudi
// buffer's ExportDMABuf fails with ErrClosed, as Export and every gated
// call do (it failed with ErrFreed, or with ErrDevice or ErrInvalid from
// a device Close was closing).
func TestExportDMABufAfterClose(t *testing.T) {
	e := newEngine(t, Config{})
	d, err := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	require.NoError(t, e.Close())
	x, err := d.ExportDMABuf()
	require.ErrorIs(t, err, ErrClosed)
	require.Nil(t, x)
	_, err = d.Export()
	require.ErrorIs(t, err, ErrClosed)
}
