package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func liveBuffers(e *Engine) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.buffers)
}

// TestStageTimeoutKeepsMemoryUntilDMAEnds: a copy between two devices
// that times out while its device-to-host DMA is still in flight ends with
// ErrTimeout at its deadline, but its two bounce buffers (and the source
// buffer the user frees meanwhile) live until the DMA has retired. Before,
// stageCopy freed the bounce buffers at the deadline and the late DMA
// wrote into whatever was mapped there next.
func TestStageTimeoutKeepsMemoryUntilDMAEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		inject func(e *Engine)
	}{
		{"completion delayed", Config{EmulatedCount: 2}, func(e *Engine) {
			e.cp.Devs[0].Sim.DelayNextCS(1, time.Second)
		}},
		{"hung until the TDR", Config{EmulatedCount: 2, Emulator: EmulatorConfig{CSTimeout: time.Second}}, func(e *Engine) {
			e.cp.Devs[0].Sim.HangNextCS(1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, tc.cfg)
			ctx := context.Background()
			const n = 1 << 20
			h, err := e.Alloc(n, Host)
			require.NoError(t, err)
			d0, err := e.Alloc(n, Gaudi(0))
			require.NoError(t, err)
			d1, err := e.Alloc(n, Gaudi(1))
			require.NoError(t, err)
			fill(h.Bytes(), 3)
			require.NoError(t, e.CopySync(ctx, d0.All(), h.All()))
			base := liveBuffers(e)
			act := e.cp.Devs[0].Actor

			tc.inject(e) // the first D2H, d0 -> bounce, stays in flight
			err = e.Copy(ctx, d1.All(), d0.All(), Timeout(20*time.Millisecond)).Wait(ctx)
			require.ErrorIs(t, err, ErrTimeout)
			require.NoError(t, d0.Free())
			live := liveBuffers(e)
			srcGone := d0.released.Load()
			// Read after: the DMA was in flight when live and srcGone were.
			require.Positive(t, act.Outstanding(), "the DMA must still be in flight for this test to mean anything")
			require.Equal(t, base+2, live, "bounce buffers released while their DMA is in flight")
			require.False(t, srcGone, "source buffer released while a DMA reads it")

			// Once the DMA retires, everything is released.
			require.Eventually(t, func() bool { return liveBuffers(e) == base-1 }, 30*time.Second, time.Millisecond)
			require.Eventually(t, d0.released.Load, 30*time.Second, time.Millisecond)
			require.Eventually(t, func() bool { return act.Outstanding() == 0 }, 30*time.Second, time.Millisecond)
		})
	}
}
