package dma

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// TestProgress: a Gaudi3 device in direct mode has a progress stamp (the
// sum of its completion counters) that moves as its submissions complete;
// before direct mode is set up, after Close, and on Gaudi2 (whose
// completions only WAIT_CS reports) it has none.
func TestProgress(t *testing.T) {
	t.Run("gaudi3", func(t *testing.T) {
		d, _ := openG3(t, hlsim.Config{}, nil)
		_, ok := d.Progress()
		require.False(t, ok, "no stamp before direct mode is set up")
		roundTrip(t, d, 4096) // three copies
		v1, ok := d.Progress()
		require.True(t, ok)
		require.GreaterOrEqual(t, v1, uint64(3), "the counters moved with the three copies")
		roundTrip(t, d, 4096)
		v2, ok := d.Progress()
		require.True(t, ok)
		require.GreaterOrEqual(t, v2, v1+3)
		require.NoError(t, d.Close())
		_, ok = d.Progress()
		require.False(t, ok, "no stamp after Close")
	})
	t.Run("gaudi2", func(t *testing.T) {
		d := openSim(t, hlsim.ModelGaudi2)
		roundTrip(t, d, 4096)
		_, ok := d.Progress()
		require.False(t, ok)
	})
}
