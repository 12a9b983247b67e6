package engine

// Regression tests for defects found in review.

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/wire"
)

// R5: the actor only polls the oldest MaxPoll (16) CSs; a CS behind 16 slow
// ones is not noticed when it completes, and its deadline fires although
// the hardware finished it long before.
func TestRegressHeadOfLineSpuriousTimeout(t *testing.T) {
	e := newEngine(t, Config{MaxOpsPerCS: 1})
	h, _ := e.Alloc(1<<20, Host)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	ctx := context.Background()
	e.devs[0].sim.DelayNextCS(16, time.Second)
	var slow []*Future
	for i := 0; i < 16; i++ {
		slow = append(slow, e.Copy(ctx, d.Slice(i*4096, 4096), h.Slice(i*4096, 4096)))
	}
	require.Eventually(t, func() bool { return e.devs[0].actor.Outstanding() == 16 }, time.Second, time.Millisecond)
	start := time.Now()
	f := e.Copy(ctx, h.Slice(512<<10, 4096), d.Slice(0, 4096), Timeout(300*time.Millisecond)) // D2H, not delayed
	err := f.Wait(ctx)
	t.Logf("fast copy (its CS is not delayed) ended after %v with %v", time.Since(start), err)
	for _, s := range slow {
		s.Wait(ctx)
	}
	require.NoError(t, err, "a CS the device completed at once timed out because the actor never polled it")
}

// R6: a batch whose device part panics is resolved (Done closed) while a
// cross-device staging copy of the same batch still runs and still holds d1.
func TestRegressPanicResolvesBatchWhileStagingRuns(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 2})
	ctx := context.Background()
	h, _ := e.Alloc(1<<20, Host)
	d0, _ := e.Alloc(8<<20, Gaudi(0))
	d1, _ := e.Alloc(8<<20, Gaudi(1))
	rel := make(chan struct{})
	var armed, first atomic.Bool
	first.Store(true)
	hook := func() {
		if first.CompareAndSwap(true, false) {
			<-rel
			return
		}
		if armed.CompareAndSwap(true, false) {
			panic("injected")
		}
	}
	e.hookProcess.Store(&hook)
	fx := e.Copy(ctx, d1.Slice(6<<20, 4096), h.Slice(8192, 4096)) // blocks gaudi1's H2D drain in the hook
	require.Eventually(t, func() bool { return !first.Load() }, time.Second, 100*time.Microsecond)
	e.devs[0].sim.DelayNextCS(1, 300*time.Millisecond) // the staging D2H out of d0
	b := e.NewBatch()
	b.Copy(d1.Slice(0, 4<<20), d0.Slice(0, 4<<20))  // cross-device: staged
	b.Copy(d1.Slice(4<<20, 4096), h.Slice(0, 4096)) // gaudi1 H2D: queued behind fx
	bf := b.Submit(ctx)
	require.Eventually(t, func() bool { return e.devs[0].actor.Outstanding() == 1 }, time.Second, 100*time.Microsecond)
	armed.Store(true)
	close(rel)
	require.NoError(t, fx.Wait(ctx))
	<-bf.Done()
	inUse := d1.state.Load() &^ freedBit
	t.Logf("batch Done: err=%v errs=%v; d1 in-flight count right after Done=%d", bf.Err(), bf.Errs(), inUse)
	time.Sleep(600 * time.Millisecond)
	t.Logf("600ms later: d1 in-flight count=%d (staging finished; the panicked op's reference leaked)", d1.state.Load()&^freedBit)
	require.Zero(t, inUse, "Done was closed while an op of the batch was still using d1")
}

// R7: a copy whose chunk count exceeds one CS's capacity is refused with
// ErrInvalid (and does not fail other copies).
func TestRegressLargeCopySmallChunks(t *testing.T) {
	e := newEngine(t, Config{ChunkSize: 4096})
	h, _ := e.Alloc(64<<20, Host)
	d, _ := e.Alloc(64<<20, Gaudi(0))
	err := e.CopySync(context.Background(), d.All(), h.All())
	require.ErrorIs(t, err, ErrInvalid, "too many packets for one CS: a clear ErrInvalid, not a device error")
}

// R8: stats count a staged cross-device copy several times.
func TestRegressStagingStats(t *testing.T) {
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

func TestRegressCloseWithHungCS(t *testing.T) {
	e, err := New(Config{Devices: DevicesEmulated, CloseGrace: 100 * time.Millisecond, Emulator: EmulatorConfig{DRAMSize: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := e.Alloc(1<<20, Host)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	e.devs[0].sim.HangNextCS(1)
	f := e.Copy(context.Background(), d.All(), h.All())
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	cerr := e.Close()
	t.Logf("Close took %v, err=%v; future: %v", time.Since(start), cerr, f.Err())
	require.True(t, f.IsDone(), "Close ends a copy stuck on a hung CS")
}

// R9: a cross-device Copy blocks in the staging pool's Submit, ignoring its
// ctx and Config.QueueFull.
func TestRegressStagingSubmitBlocks(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 2, QueueFull: FailWhenFull})
	d0, _ := e.Alloc(1<<20, Gaudi(0))
	d1, _ := e.Alloc(1<<20, Gaudi(1))
	n := cap(e.stageSem)
	e.devs[0].sim.DelayNextCS(n, 500*time.Millisecond)
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

// R11: the Timeout option is ignored by cross-device (staged) copies.
func TestRegressTimeoutIgnoredCrossDevice(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 2})
	d0, _ := e.Alloc(1<<20, Gaudi(0))
	d1, _ := e.Alloc(1<<20, Gaudi(1))
	e.devs[0].sim.DelayNextCS(1, 400*time.Millisecond)
	start := time.Now()
	err := e.CopySync(context.Background(), d1.All(), d0.All(), Timeout(50*time.Millisecond))
	t.Logf("cross-device copy with Timeout(50ms), device delay 400ms: err=%v after %v", err, time.Since(start))
}

// R12: Free right after a cross-device Copy makes the staged copy fail with
// ErrFreed: the staging task re-acquires the user's buffers for its inner
// copies, and acquire refuses a buffer marked freed.
func TestRegressFreeDuringStagedCopy(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 2})
	d0, _ := e.Alloc(8<<20, Gaudi(0))
	d1, _ := e.Alloc(8<<20, Gaudi(1))
	e.devs[0].sim.DelayNextCS(1, 50*time.Millisecond)
	f := e.Copy(context.Background(), d1.All(), d0.All())
	if err := d0.Free(); err != nil {
		t.Fatal(err)
	}
	err := f.Wait(context.Background())
	require.NoError(t, err, "Free is deferred while a staged copy uses the buffer")
}

// R1: a panic in a drain worker strands jobs still in the queue: sched is
// reset to false but nobody reschedules a drain.
func TestRegressPanicStrandsQueuedJobs(t *testing.T) {
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
			panic("injected")
		}
	}
	e.hookProcess.Store(&hook)
	ctx := context.Background()
	fa := e.Copy(ctx, d.Slice(0, 4096), h.Slice(0, 4096))
	<-entered
	fb := e.Copy(ctx, d.Slice(4096, 4096), h.Slice(4096, 4096)) // queued; sched is true so no new drain
	close(release)
	require.ErrorIs(t, fa.Wait(ctx), ErrPanic)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := fb.Wait(wctx)
	t.Logf("second copy after 2s: err=%v done=%v", err, fb.IsDone())
	st := e.Stats()
	t.Logf("stats: submitted=%d completed=%d failed=%d inflight=%d", st.Submitted, st.Completed, st.Failed, st.InFlight)
	require.True(t, fb.IsDone(), "queued copy was stranded after the panic")
}

// R2: a panic in a drain leaks buffer references: Free never releases.
func TestRegressPanicLeaksBufferRefs(t *testing.T) {
	e := newEngine(t, Config{})
	h, _ := e.Alloc(4096, Host)
	d, _ := e.Alloc(4096, Gaudi(0))
	hook := func() { panic("injected") }
	e.hookProcess.Store(&hook)
	require.ErrorIs(t, e.CopySync(context.Background(), d.All(), h.All()), ErrPanic)
	e.hookProcess.Store(nil)
	require.NoError(t, h.Free())
	time.Sleep(100 * time.Millisecond)
	e.mu.Lock()
	_, alive := e.buffers[h.id]
	e.mu.Unlock()
	st := e.Stats()
	t.Logf("host buffer state=%#x released=%v still tracked=%v; InFlight=%d", h.state.Load(), h.released.Load(), alive, st.InFlight)
	require.False(t, alive, "freed buffer never destroyed: its in-flight count leaked")
}

// R3: a CS's deadline is the earliest deadline of its ops, and timeout()
// fails every op of the CS, including ones with no deadline at all.
func TestRegressTimeoutHitsOpsWithoutDeadline(t *testing.T) {
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
	e.hookProcess.Store(&hook)
	ctx := context.Background()
	e.devs[0].sim.DelayNextCS(2, 400*time.Millisecond)
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

// R4: a batch is submitted half-way: host copies run and cross-device
// copies start before the device part fails with ErrQueueFull.
func TestRegressBatchHalfSubmitted(t *testing.T) {
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
	e.hookProcess.Store(&hook)
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
	require.False(t, bytes.Equal(h.Bytes()[:4096], out.Bytes()[:4096]), "host copy of a batch that failed with ErrQueueFull was already performed")
}

// TestVerifyKeyCache: the last verified key is remembered, but only a key
// with exactly the same signed bytes skips the MAC; an edited copy of it
// (same MAC, other fields) is still refused.
func TestVerifyKeyCache(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	b, _ := e.Alloc(4096, Host)
	k, err := b.Export()
	require.NoError(t, err)
	good := k.k
	require.NoError(t, e.verifyKey(&good))
	view := good
	view.Offset, view.Len = 100, 8 // the view is not signed
	require.NoError(t, e.verifyKey(&view))
	for _, edit := range []func(*wire.RemoteKey){
		func(k *wire.RemoteKey) { k.AllocID++ },
		func(k *wire.RemoteKey) { k.Length *= 2 },
		func(k *wire.RemoteKey) { k.Flags |= wire.KeyWrite << 4 },
		func(k *wire.RemoteKey) { k.MAC[0] ^= 1 },
	} {
		forged := good
		edit(&forged)
		require.Error(t, e.verifyKey(&forged))
		require.NoError(t, e.verifyKey(&good))
	}
}
