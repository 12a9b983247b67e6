package engine

// Cross-device copies (staged through host memory): stats, submission,
// Free.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Regression test: stats count a staged cross-device copy several times.
func TestCrossDeviceStatsCountOnce(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 2})
	d0, _ := e.Alloc(16<<20, Gaudi(0))
	d1, _ := e.Alloc(16<<20, Gaudi(1))
	before := e.Stats()
	require.NoError(t, e.CopySync(context.Background(), d1.All(), d0.All()))
	after := e.Stats()
	t.Logf("one 16 MiB cross-device copy: Submitted +%d, Completed +%d, Bytes +%d MiB",
		after.Submitted-before.Submitted, after.Completed-before.Completed, (after.Bytes-before.Bytes)>>20)
	require.Equal(t, uint64(1), after.Completed-before.Completed)
}

// Regression test: a cross-device Copy blocks in the staging pool's Submit, ignoring its
// ctx and Config.QueueFull.
func TestCrossDeviceSubmitDoesNotBlock(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 2, QueueFull: FailWhenFull})
	d0, _ := e.Alloc(1<<20, Gaudi(0))
	d1, _ := e.Alloc(1<<20, Gaudi(1))
	n := e.cp.StageTasks()
	e.cp.Devs[0].Sim.DelayNextCS(n, 500*time.Millisecond)
	var futs []*Future
	for i := 0; i < n; i++ {
		futs = append(futs, e.Copy(context.Background(), d1.Slice(i*4096, 4096), d0.Slice(i*4096, 4096)))
	}
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	f := e.Copy(ctx, d1.Slice(512<<10, 4096), d0.Slice(512<<10, 4096))
	_ = start
	require.False(t, futs[0].IsDone(), "submitting a cross-device copy does not wait for the staging tasks ahead of it")
	f.Wait(context.Background())
	for _, f := range futs {
		f.Wait(context.Background())
	}
}

// Regression test: Free right after a cross-device Copy makes the staged copy fail with
// ErrFreed: the staging task re-acquires the user's buffers for its inner
// copies, and acquire refuses a buffer marked freed.
func TestCrossDeviceFreeDeferred(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 2})
	d0, _ := e.Alloc(8<<20, Gaudi(0))
	d1, _ := e.Alloc(8<<20, Gaudi(1))
	e.cp.Devs[0].Sim.DelayNextCS(1, 50*time.Millisecond)
	f := e.Copy(context.Background(), d1.All(), d0.All())
	if err := d0.Free(); err != nil {
		t.Fatal(err)
	}
	err := f.Wait(context.Background())
	require.NoError(t, err, "Free is deferred while a staged copy uses the buffer")
}
