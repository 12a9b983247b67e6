package dma

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// TestWaitOutcomeOfGoneCS: a CS aborted by a reset whose completion slot
// is taken by later CSs before anyone waits for it. The driver then no
// longer has its fence (hl_ctx_get_fence: gone); WAIT_CS reports it
// COMPLETED with the GONE flag unless the CS was submitted with
// CS_FLAGS_TIMESTAMP, whose outcome store still tells its end. Wait used
// to report the aborted copy as completed: a copy whose bytes never
// moved, counted as done.
func TestWaitOutcomeOfGoneCS(t *testing.T) {
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 256 << 20,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	cb := copyCB(t, d)

	sim.AbortNextCS(1)
	lost, err := d.Submit([]Chunk{cb.Chunk(d.H2DQueues()[0])})
	require.NoError(t, err)
	for range hlsim.DefaultMaxPendingCS + 1 {
		seq, err := d.Submit([]Chunk{cb.Chunk(d.H2DQueues()[0])})
		require.NoError(t, err)
		st, err := d.Wait(seq, 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, CSCompleted.String(), st.String())
	}
	st, err := d.Wait(lost, 0)
	require.ErrorIs(t, err, ErrCSAborted, "the aborted CS, its fence gone, waited for (status %v)", st)
	require.Equal(t, CSAborted.String(), st.String())
	st, err = d.Wait(lost, 0)
	require.Error(t, err, "its outcome, once taken, is not reported as a completion (status %v)", st)
}
