package engine

// Submission limits and failures: oversized copies, a batch meeting a full
// queue, Close with a hung command submission.

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Regression test: a copy whose chunk count exceeds one CS's capacity is refused with
// ErrInvalid (and does not fail other copies).
func TestCopyTooManyChunksInvalid(t *testing.T) {
	e := newEngine(t, Config{ChunkSize: 4096})
	h, _ := e.Alloc(64<<20, Host)
	d, _ := e.Alloc(64<<20, Gaudi(0))
	err := e.CopySync(context.Background(), d.All(), h.All())
	require.ErrorIs(t, err, ErrInvalid, "too many packets for one CS: a clear ErrInvalid, not a device error")
}

// Regression test: a batch is submitted half-way: host copies run and cross-device
// copies start before the device part fails with ErrQueueFull.
func TestBatchQueueFullRunsNothing(t *testing.T) {
	e := newEngine(t, Config{QueueDepth: 1, QueueFull: FailWhenFull})
	ctx := context.Background()
	h, _ := e.Alloc(1<<20, Host)
	out, _ := e.Alloc(1<<20, Host)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	fill(h.Bytes(), 1)
	// Block the H2D drain and fill the queue.
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
	f0 := e.Copy(ctx, d.Slice(0, 64), h.Slice(0, 64))
	<-entered
	f1 := e.Copy(ctx, d.Slice(64, 64), h.Slice(64, 64)) // fills the depth-1 queue
	b := e.NewBatch()
	b.Copy(out.Slice(0, 4096), h.Slice(0, 4096)) // host op
	b.Copy(d.Slice(8192, 64), h.Slice(8192, 64)) // device op -> queue full
	bf := b.Submit(ctx)
	<-bf.Done()
	close(release)
	f0.Wait(ctx)
	f1.Wait(ctx)
	t.Logf("batch err=%v errs=%v", bf.Err(), bf.Errs())
	require.True(t, errors.Is(bf.Err(), ErrQueueFull))
	for i, err := range bf.Errs() {
		// The batch as a whole was refused: no copy is blamed for it.
		require.ErrorIs(t, err, ErrQueueFull, "copy %d", i)
		require.NotContains(t, err.Error(), "copy 0 failed", "copy %d", i)
	}
	require.False(t, bytes.Equal(h.Bytes()[:4096], out.Bytes()[:4096]), "host copy of a batch that failed with ErrQueueFull was already performed")
}

func TestCloseEndsHungCS(t *testing.T) {
	e, err := New(Config{Devices: DevicesEmulated, CloseGrace: 100 * time.Millisecond, Emulator: EmulatorConfig{DRAMSize: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := e.Alloc(1<<20, Host)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	e.cp.Devs[0].Sim.HangNextCS(1)
	f := e.Copy(context.Background(), d.All(), h.All())
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	cerr := e.Close()
	t.Logf("Close took %v, err=%v; future: %v", time.Since(start), cerr, f.Err())
	require.True(t, f.IsDone(), "Close ends a copy stuck on a hung CS")
}
