package copier

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSubmitOnCallerWhenIdle: a device copy finding its queue idle is
// turned into a command submission on the caller's goroutine (the CS is
// on the device when Copy returns, no worker involved); one finding the
// queue's drain taken is queued for a worker, which submits it once the
// queue is rescheduled.
func TestSubmitOnCallerWhenIdle(t *testing.T) {
	tests := []struct {
		name       string
		busy       bool // the (device, direction)'s drain role is taken
		wantInline uint64
	}{
		{"idle queue", false, 1},
		{"drain running", true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1)
			g := r.c.Devs[0]
			src, d := r.host(t, 4096), r.gaudi(t, 0, 4096)
			if tc.busy {
				require.True(t, g.sched[dirH2D].CompareAndSwap(false, true))
			}
			cs0 := g.Sim.Stats().CSSubmitted
			src.Refs.Add(1)
			d.Refs.Add(1)
			f := NewFuture(1)
			require.NoError(t, r.c.Copy(context.Background(), f, Slice{M: d, N: 4096}, Slice{M: src, N: 4096}, time.Time{}))
			submitted := g.Sim.Stats().CSSubmitted - cs0
			require.Equal(t, tc.wantInline, r.st.InlineSubmits.Load())
			require.Equal(t, tc.wantInline, submitted, "CSs on the device when Copy returned")
			if tc.busy {
				require.Equal(t, 1, g.queues[dirH2D].Len())
				g.sched[dirH2D].Store(false)
				g.schedule(dirH2D)
			}
			require.NoError(t, f.Wait(context.Background()))
			require.Zero(t, src.Refs.Load())
			require.Zero(t, d.Refs.Load())
		})
	}
}

// TestSubmitOnCallerClosed: once Stop closed the queues, a copy is
// refused (nothing queued, the references stay the caller's) also on the
// caller's path.
func TestSubmitOnCallerClosed(t *testing.T) {
	r := newRig(t, 1)
	src, d := r.host(t, 4096), r.gaudi(t, 0, 4096)
	r.c.Stop()
	f := NewFuture(1)
	err := r.c.Copy(context.Background(), f, Slice{M: d, N: 4096}, Slice{M: src, N: 4096}, time.Time{})
	require.Error(t, err)
	require.Zero(t, r.st.InlineSubmits.Load())
	require.False(t, f.IsDone())
}

// TestPipelinedCSs: a large batch goes out in command submissions that
// grow from pipelineFirstOps copies, doubling up to MaxOpsPerCS, so the
// device starts before the whole batch is encoded.
func TestPipelinedCSs(t *testing.T) {
	tests := []struct {
		name    string
		ops     int
		maxOps  int
		wantCSs uint64
	}{
		{"one copy", 1, 1024, 1},
		{"first CS only", 32, 1024, 1},
		{"64 copies", 64, 1024, 2},   // 32 + 32
		{"256 copies", 256, 1024, 4}, // 32 + 64 + 128 + 32
		{"capped by MaxOpsPerCS", 256, 16, 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1)
			r.c.cfg.MaxOpsPerCS = tc.maxOps
			const size = 4096
			src, d := r.host(t, tc.ops*size), r.gaudi(t, 0, tc.ops*size)
			ops := make([]Op, tc.ops)
			for i := range ops {
				src.Refs.Add(1)
				d.Refs.Add(1)
				off := uint64(i * size)
				ops[i] = Op{Dst: Slice{M: d, Off: off, N: size}, Src: Slice{M: src, Off: off, N: size}, Idx: i}
			}
			f := &Future{}
			f.InitBatch(tc.ops)
			require.NoError(t, r.c.SubmitBatch(context.Background(), f, ops, time.Time{}))
			require.NoError(t, f.Wait(context.Background()))
			require.Equal(t, tc.wantCSs, r.st.CS.Load())
			require.Zero(t, src.Refs.Load())
			require.Zero(t, d.Refs.Load())
		})
	}
}

// TestSubmitOnCallerOnlyWhenNotLoaded: with inlineMaxOutstanding command
// submissions in flight (here hung on the device), further jobs go to the
// workers: the caller never waits for room on a loaded device.
func TestSubmitOnCallerOnlyWhenNotLoaded(t *testing.T) {
	r := newRig(t, 1)
	g := r.c.Devs[0]
	const n = inlineMaxOutstanding + 8
	g.Sim.HangNextCS(n)
	src, d := r.host(t, 4096), r.gaudi(t, 0, 4096)
	futs := make([]*Future, n)
	for i := range futs {
		src.Refs.Add(1)
		d.Refs.Add(1)
		futs[i] = NewFuture(1)
		require.NoError(t, r.c.Copy(context.Background(), futs[i], Slice{M: d, N: 4096}, Slice{M: src, N: 4096}, time.Time{}))
	}
	require.Equal(t, uint64(inlineMaxOutstanding), r.st.InlineSubmits.Load())
	// The workers coalesce the queued jobs into one or a few CSs.
	require.Eventually(t, func() bool { return g.queues[dirH2D].Len() == 0 && !g.sched[dirH2D].Load() }, 10*time.Second, time.Millisecond)
	require.Greater(t, g.Actor.Outstanding(), inlineMaxOutstanding)
	g.Sim.Reset() // aborts the hung CSs
	for _, f := range futs {
		require.Error(t, f.Wait(context.Background()))
	}
	require.Zero(t, src.Refs.Load())
	require.Zero(t, d.Refs.Load())
}

// TestStopWaitsForInlineRuns: Stop does not return while a copy is being
// turned into command submissions on its caller's goroutine (it builds
// command buffers of the device Close then releases: the race detector
// saw Device.Close destroy a CB an inline run was filling), and no inline
// run starts once Stop began.
func TestStopWaitsForInlineRuns(t *testing.T) {
	r := newRig(t, 1)
	require.True(t, r.c.inline.enter(), "an inline run in progress")
	stopped := make(chan struct{})
	go func() {
		r.c.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Stop returned while an inline run was in progress")
	case <-time.After(100 * time.Millisecond):
	}
	r.c.inline.exit()
	<-stopped
	require.False(t, r.c.inline.enter(), "no inline run after Stop")
}

// TestInlineRunsClose: close waits for every run that entered, whichever
// exits last; it returns at once with none running; a second close waits
// as the first; no run enters after close began.
func TestInlineRunsClose(t *testing.T) {
	for _, running := range []int{0, 1, 3} {
		var r inlineRuns
		for range running {
			require.True(t, r.enter())
		}
		closed := make(chan struct{}, 2)
		for range 2 {
			go func() {
				r.close()
				closed <- struct{}{}
			}()
		}
		if running > 0 {
			// close has begun once it marked the state (a goroutine
			// scheduled late on a loaded machine has not, 20 ms on).
			require.Eventually(t, func() bool { return r.state.Load()&inlineClosed != 0 }, 5*time.Second, time.Millisecond)
		}
		for i := range running {
			select {
			case <-closed:
				t.Fatalf("%d runs: close returned with %d still running", running, running-i)
			case <-time.After(20 * time.Millisecond):
			}
			require.False(t, r.enter(), "no run enters once close began")
			r.exit()
		}
		<-closed
		<-closed
		require.False(t, r.enter())
	}
}
