package copier

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestMalfunctionKeepsMemory: with the driver's reset_on_lockup=0 a
// device whose CS timed out goes to NEEDS_RESET without a reset, refuses
// every wait (hl_wait_ioctl: EBUSY), and its engines may still run the
// CSs in flight (dma/hlsim RULES.md R10). WaitCS then ends such a CS with
// ErrMalfunction. Its copy fails at once, but the memory it uses stays
// held (buffer references, host mappings, command buffers) until the
// device is closed the way that stops it: it used to be released then,
// under DMA that may still run.
func TestMalfunctionKeepsMemory(t *testing.T) {
	r := newRig(t, 1)
	g := r.c.Devs[0]
	g.Sim.HangNextCS(1) // the CS stays on the engines
	src, dst := r.host(t, 4096), r.gaudi(t, 0, 4096)
	src.Refs.Add(1)
	dst.Refs.Add(1)
	f := NewFuture(1)
	require.NoError(t, r.c.Copy(context.Background(), f, Slice{M: dst, N: 4096}, Slice{M: src, N: 4096}, time.Time{}))
	require.Eventually(t, func() bool { return g.Sim.Stats().CSSubmitted == 1 }, 10*time.Second, time.Millisecond)
	g.Sim.ForceStatus(hlsys.DeviceStatusNeedsReset)

	require.Error(t, f.Wait(context.Background()), "the copy failed")
	require.Equal(t, uint64(1), src.Refs.Load(), "the CS may still read the source")
	require.Equal(t, uint64(1), dst.Refs.Load(), "the CS may still write the destination")

	r.closed.Store(true)
	r.c.Stop() // closes the device the way that stops it, then releases
	require.Zero(t, src.Refs.Load())
	require.Zero(t, dst.Refs.Load())
}
