package engine

// Operation deadlines (the Timeout option) on device and cross-device copies.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Regression test: the actor only polls the oldest MaxPoll (16) CSs; a CS behind 16 slow
// ones is not noticed when it completes, and its deadline fires although
// the hardware finished it long before.
func TestDeadlineNotSpuriousBehindSlowCSs(t *testing.T) {
	e := newEngine(t, Config{MaxOpsPerCS: 1})
	h, _ := e.Alloc(1<<20, Host)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	ctx := context.Background()
	e.cp.Devs[0].Sim.DelayNextCS(16, time.Second)
	var slow []*Future
	for i := 0; i < 16; i++ {
		slow = append(slow, e.Copy(ctx, d.Slice(i*4096, 4096), h.Slice(i*4096, 4096)))
	}
	require.Eventually(t, func() bool { return e.cp.Devs[0].Actor.Outstanding() == 16 }, time.Second, time.Millisecond)
	start := time.Now()
	f := e.Copy(ctx, h.Slice(512<<10, 4096), d.Slice(0, 4096), Timeout(300*time.Millisecond)) // D2H, not delayed
	err := f.Wait(ctx)
	t.Logf("fast copy (its CS is not delayed) ended after %v with %v", time.Since(start), err)
	for _, s := range slow {
		s.Wait(ctx)
	}
	require.NoError(t, err, "a CS the device completed at once timed out because the actor never polled it")
}

// Regression test: a CS's deadline is the earliest deadline of its ops, and timeout()
// fails every op of the CS, including ones with no deadline at all.
func TestDeadlineSparesOpsWithoutOne(t *testing.T) {
	e := newEngine(t, Config{})
	h, _ := e.Alloc(1<<20, Host)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	entered := make(chan struct{})
	release := make(chan struct{})
	first := true
	hook := func() {
		if first {
			first = false
			close(entered)
			<-release
		}
	}
	e.cp.HookProcess.Store(&hook)
	ctx := context.Background()
	e.cp.Devs[0].Sim.DelayNextCS(2, 400*time.Millisecond)
	f0 := e.Copy(ctx, d.Slice(0, 4096), h.Slice(0, 4096))
	<-entered
	fa := e.Copy(ctx, d.Slice(8192, 4096), h.Slice(8192, 4096), Timeout(150*time.Millisecond))
	fb := e.Copy(ctx, d.Slice(16384, 4096), h.Slice(16384, 4096)) // no deadline
	close(release)
	t.Logf("f0 (alone, no deadline): %v", f0.Wait(ctx))
	t.Logf("fa (Timeout 150ms): %v", fa.Wait(ctx))
	errB := fb.Wait(ctx)
	t.Logf("fb (no deadline, same CS as fa): %v", errB)
	require.NoError(t, errB, "an op without a deadline failed with ErrTimeout")
}

// Regression test: the Timeout option is ignored by cross-device (staged) copies.
func TestTimeoutCrossDeviceCopy(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 2})
	d0, _ := e.Alloc(1<<20, Gaudi(0))
	d1, _ := e.Alloc(1<<20, Gaudi(1))
	e.cp.Devs[0].Sim.DelayNextCS(1, 400*time.Millisecond)
	start := time.Now()
	err := e.CopySync(context.Background(), d1.All(), d0.All(), Timeout(50*time.Millisecond))
	t.Logf("cross-device copy with Timeout(50ms), device delay 400ms: err=%v after %v", err, time.Since(start))
}

// Regression test: a copy whose CS the device cannot take yet (every
// completion slot holds a CS in flight) waited in the CS ioctl's retries
// until a slot freed, and then succeeded, long past its Timeout: the
// deadline was not looked at until the CS was tracked.
func TestTimeoutWhileCompletionSlotsFull(t *testing.T) {
	for _, model := range []string{"gaudi2", "gaudi3"} {
		t.Run(model, func(t *testing.T) {
			e := newEngine(t, Config{MaxOpsPerCS: 1, Emulator: EmulatorConfig{Model: model}})
			h, _ := e.Alloc(1<<20, Host)
			d, _ := e.Alloc(1<<20, Gaudi(0))
			ctx := context.Background()
			sim := e.cp.Devs[0].Sim
			fill := delayEverySlot(t, e, d, h)
			f := e.Copy(ctx, d.Slice(512<<10, 4096), h.Slice(512<<10, 4096), Timeout(50*time.Millisecond))
			err := f.Wait(ctx)
			for _, f := range fill {
				require.NoError(t, f.Wait(ctx))
			}
			require.ErrorIs(t, err, ErrTimeout, "the copy ran after its deadline")
			require.EqualValues(t, maxPendingCS, sim.Stats().CSSubmitted, "the timed-out copy reached the device")
		})
	}
}

// Regression test: a copy with a Timeout queued behind a worker that waits
// in the CS ioctl's retries (every completion slot held, the CS it submits
// has no deadline) ended with ErrTimeout only once the worker got to it,
// when the device freed a slot: its deadline was not watched while queued.
func TestTimeoutWhileQueuedBehindStalledSubmit(t *testing.T) {
	e := newEngine(t, Config{MaxOpsPerCS: 1})
	h, _ := e.Alloc(1<<20, Host)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	ctx := context.Background()
	sim := e.cp.Devs[0].Sim
	fill := delayEverySlot(t, e, d, h)
	stalled := e.Copy(ctx, d.Slice(512<<10, 4096), h.Slice(512<<10, 4096)) // no deadline
	for e.cp.Devs[0].Dev.Stats().SubmitRetries == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	f := e.Copy(ctx, d.Slice(600<<10, 4096), h.Slice(600<<10, 4096), Timeout(50*time.Millisecond))
	err := f.Wait(ctx)
	waitedForDevice := fill[0].IsDone()
	require.NoError(t, stalled.Wait(ctx))
	for _, f := range fill {
		require.NoError(t, f.Wait(ctx))
	}
	require.ErrorIs(t, err, ErrTimeout)
	require.False(t, waitedForDevice, "the queued copy's deadline was noticed only once the device freed a slot")
	require.EqualValues(t, maxPendingCS+1, sim.Stats().CSSubmitted, "the timed-out copy reached the device")
}
