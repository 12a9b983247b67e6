package engine

// A panic in a worker: the operations it held fail with ErrPanic, nothing
// else is stranded or leaked.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Regression test: a panic in a drain worker strands jobs still in the queue: sched is
// reset to false but nobody reschedules a drain.
func TestPanicDoesNotStrandQueuedJobs(t *testing.T) {
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
	e.cp.HookProcess.Store(&hook)
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

// Regression test: a panic in a drain leaks buffer references: Free never releases.
func TestPanicReleasesBufferRefs(t *testing.T) {
	e := newEngine(t, Config{})
	h, _ := e.Alloc(4096, Host)
	d, _ := e.Alloc(4096, Gaudi(0))
	hook := func() { panic("injected") }
	e.cp.HookProcess.Store(&hook)
	require.ErrorIs(t, e.CopySync(context.Background(), d.All(), h.All()), ErrPanic)
	e.cp.HookProcess.Store(nil)
	require.NoError(t, h.Free())
	time.Sleep(100 * time.Millisecond)
	e.mu.Lock()
	_, alive := e.buffers[h.id]
	e.mu.Unlock()
	st := e.Stats()
	t.Logf("host buffer state=%#x released=%v still tracked=%v; InFlight=%d", h.state.Load(), h.released.Load(), alive, st.InFlight)
	require.False(t, alive, "freed buffer never destroyed: its in-flight count leaked")
}

// Regression test: a batch whose device part panics is resolved (Done closed) while a
// cross-device staging copy of the same batch still runs and still holds d1.
func TestPanicBatchDoneAfterStaging(t *testing.T) {
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
	e.cp.HookProcess.Store(&hook)
	fx := e.Copy(ctx, d1.Slice(6<<20, 4096), h.Slice(8192, 4096)) // blocks gaudi1's H2D drain in the hook
	require.Eventually(t, func() bool { return !first.Load() }, time.Second, 100*time.Microsecond)
	e.cp.Devs[0].Sim.DelayNextCS(1, 300*time.Millisecond) // the staging D2H out of d0
	b := e.NewBatch()
	b.Copy(d1.Slice(0, 4<<20), d0.Slice(0, 4<<20))  // cross-device: staged
	b.Copy(d1.Slice(4<<20, 4096), h.Slice(0, 4096)) // gaudi1 H2D: queued behind fx
	bf := b.Submit(ctx)
	require.Eventually(t, func() bool { return e.cp.Devs[0].Actor.Outstanding() == 1 }, time.Second, 100*time.Microsecond)
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
