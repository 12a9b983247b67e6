package copier

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gxerr"
)

// stagingGoroutines counts the goroutines running or waiting in the
// staging of copies between devices.
func stagingGoroutines() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\ngoroutine ")) {
		if bytes.Contains(g, []byte("internal/copier.(*Copier).stage")) {
			n++
		}
	}
	return n
}

// TestStageBoundsGoroutines: a batch of many small copies between two
// devices stages at most StageTasks of them at a time, and starts no more
// goroutines than that (it started one goroutine, and a timer, per copy,
// all at once); the copies waiting for a turn keep their ctx and deadline
// behaviour: they end at once when ctx ends or their deadline passes
// (ErrCanceled, ErrTimeout), releasing their buffers, while the staged
// ones are held; else every copy completes.
func TestStageBoundsGoroutines(t *testing.T) {
	const n, size = 256, 4096
	for _, tc := range []struct {
		name string
		stop string // "cancel", "deadline" or "" (none)
		want error
	}{
		{"complete", "", nil},
		{"cancel", "cancel", gxerr.Canceled},
		{"deadline", "deadline", gxerr.Timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 2)
			// The staged copies wait in AllocHost (their bounce buffers)
			// until released.
			release := make(chan struct{})
			var once sync.Once
			unblock := func() { once.Do(func() { close(release) }) }
			t.Cleanup(unblock) // before the rig's Stop
			var allocs atomic.Int32
			r.c.cfg.AllocHost = func(sz int) (*Mem, error) {
				allocs.Add(1)
				<-release
				return r.hostMem(sz)
			}
			src, dst := r.gaudi(t, 0, n*size), r.gaudi(t, 1, n*size)
			ops := make([]Op, n)
			for i := range ops {
				ops[i] = Op{Dst: Slice{M: dst, Off: uint64(i * size), N: size}, Src: Slice{M: src, Off: uint64(i * size), N: size}, Idx: i}
			}
			src.Refs.Add(n)
			dst.Refs.Add(n)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var deadline time.Time
			if tc.stop == "deadline" {
				deadline = time.Now().Add(300 * time.Millisecond)
			}
			f := new(Future)
			f.InitBatch(n) // per-copy results (Errs: nil for a plain future)
			inline := r.st.InlineSubmits.Load()
			require.NoError(t, r.c.SubmitBatch(ctx, f, ops, deadline))
			require.Equal(t, inline+1, r.st.InlineSubmits.Load(), "the batch was processed on this goroutine: every copy is staged")
			tasks := r.c.StageTasks()
			for i := 0; i < 10000 && int(allocs.Load()) < tasks; i++ {
				time.Sleep(time.Millisecond)
			}
			require.Equal(t, tasks, int(allocs.Load()), "staged copies waiting in AllocHost")
			require.LessOrEqual(t, stagingGoroutines(), tasks, "goroutines staging copies")
			if tc.stop != "" {
				if tc.stop == "cancel" {
					cancel()
				}
				// The copies waiting for a turn end (bounded by 10 s),
				// the staged ones still held.
				held := uint64(tasks)
				for i := 0; i < 10000 && src.Refs.Load() > held; i++ {
					time.Sleep(time.Millisecond)
				}
				require.Equal(t, held, src.Refs.Load(), "copies waiting for a turn released their source")
				require.Equal(t, held, dst.Refs.Load(), "copies waiting for a turn released their destination")
				require.Equal(t, tasks, int(allocs.Load()), "no copy staged meanwhile")
			}
			unblock()
			err := f.Wait(context.Background())
			// A staged copy past its deadline keeps its buffers until its
			// DMAs retire (bounded by 10 s).
			for i := 0; i < 10000 && src.Refs.Load()+dst.Refs.Load() > 0; i++ {
				time.Sleep(time.Millisecond)
			}
			require.Zero(t, src.Refs.Load())
			require.Zero(t, dst.Refs.Load())
			if tc.want == nil {
				require.NoError(t, err)
				require.Equal(t, uint64(n), r.st.Completed.Load())
				return
			}
			errs := f.Errs()
			require.Len(t, errs, n)
			for i, err := range errs {
				require.ErrorIs(t, err, tc.want, "copy %d", i)
			}
		})
	}
}

// TestStageConcurrentCopies: copies between two devices staged at the
// same time (a batch of more than one), their bounce buffers from the
// rig's own AllocHost, carry their bytes and drop every reference. The
// rig's AllocHost was not safe for concurrent use (the race detector
// reported its list of references written by two staging tasks).
func TestStageConcurrentCopies(t *testing.T) {
	const n, size = 16, 64 << 10
	r := newRig(t, 2)
	ctx := context.Background()
	in, out := r.host(t, n*size), r.host(t, n*size)
	for i, b := 0, in.Owner.([]byte); i < len(b); i++ {
		b[i] = byte(i*13 + i>>11)
	}
	d0, d1 := r.gaudi(t, 0, n*size), r.gaudi(t, 1, n*size)
	require.NoError(t, r.copy(ctx, d0, in))
	ops := make([]Op, n)
	for i := range ops {
		ops[i] = Op{Dst: Slice{M: d1, Off: uint64(i * size), N: size}, Src: Slice{M: d0, Off: uint64(i * size), N: size}, Idx: i}
	}
	d0.Refs.Add(n)
	d1.Refs.Add(n)
	f := NewFuture(n)
	require.NoError(t, r.c.SubmitBatch(ctx, f, ops, time.Time{}))
	require.NoError(t, f.Wait(ctx))
	require.NoError(t, r.copy(ctx, out, d1))
	require.True(t, bytes.Equal(in.Owner.([]byte), out.Owner.([]byte)), "bytes differ")
	for i, refs := range r.allRefs() {
		require.Zero(t, refs.Load(), "mem %d still referenced", i)
	}
}

// TestStageStopAllocatesNothing: copies between two devices still waiting
// for a staging task when Stop begins end with ErrClosed without
// allocating bounce buffers (each allocated its two, then failed with
// ErrClosed on its first inner copy), and every bounce buffer allocated
// (those of the copies being staged, held in AllocHost) is freed.
func TestStageStopAllocatesNothing(t *testing.T) {
	const size = 4096
	r := newRig(t, 2)
	tasks := r.c.StageTasks()
	n := tasks + 8 // 8 copies wait behind the held ones
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the rig's Stop
	var allocs, frees atomic.Int32
	alloc, free := r.c.cfg.AllocHost, r.c.cfg.FreeHost
	r.c.cfg.AllocHost = func(sz int) (*Mem, error) {
		allocs.Add(1)
		<-release
		return alloc(sz)
	}
	r.c.cfg.FreeHost = func(m *Mem) error {
		frees.Add(1)
		return free(m)
	}
	src, dst := r.gaudi(t, 0, n*size), r.gaudi(t, 1, n*size)
	ops := make([]Op, n)
	for i := range ops {
		ops[i] = Op{Dst: Slice{M: dst, Off: uint64(i * size), N: size}, Src: Slice{M: src, Off: uint64(i * size), N: size}, Idx: i}
	}
	src.Refs.Add(uint64(n))
	dst.Refs.Add(uint64(n))
	f := new(Future)
	f.InitBatch(n)
	require.NoError(t, r.c.SubmitBatch(context.Background(), f, ops, time.Time{}))
	// Bounded by 10 s.
	for i := 0; i < 10000 && int(allocs.Load()) < tasks; i++ {
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, tasks, int(allocs.Load()), "staged copies waiting in AllocHost")
	stopped, began := r.stopAsync()
	require.True(t, began, "Stop began")
	unblock()
	<-stopped // Stop waits for every staged copy
	// Resolved: the per-copy results are checked below.
	_ = f.Wait(context.Background())
	for i, err := range f.Errs()[tasks:] {
		require.ErrorIs(t, err, gxerr.Closed, "waiting copy %d", tasks+i)
	}
	require.Equal(t, 2*tasks, int(allocs.Load()), "bounce buffers allocated: only the held copies' two each")
	require.Equal(t, allocs.Load(), frees.Load(), "bounce buffers freed")
	require.Zero(t, src.Refs.Load())
	require.Zero(t, dst.Refs.Load())
}

// TestStageAfterStopRefused: a copy between devices staged once Stop has
// waited for the staged copies (a worker that outlived the pool's release
// stages one) ends with ErrClosed at once: it starts no staging task and
// adds nothing to the count Stop waits on (an Add racing with that Wait
// is a WaitGroup misuse).
func TestStageAfterStopRefused(t *testing.T) {
	const size = 4096
	r := newRig(t, 2)
	src, dst := r.gaudi(t, 0, size), r.gaudi(t, 1, size)
	r.c.Stop()
	src.Refs.Add(1)
	dst.Refs.Add(1)
	f := new(Future)
	f.InitBatch(1)
	j := &Job{Fut: f}
	j.Ops = j.one[:]
	j.Ops[0] = Op{Dst: Slice{M: dst, N: size}, Src: Slice{M: src, N: size}}
	r.c.stage([]ref{{j: j, o: &j.Ops[0]}})
	r.c.stageQ.mu.Lock()
	running, waiting := r.c.stageQ.running, len(r.c.stageQ.waiting)
	r.c.stageQ.mu.Unlock()
	require.Zero(t, running, "no staging task started")
	require.Zero(t, waiting, "nothing queued")
	require.True(t, f.IsDone(), "the copy ended before stage returned")
	require.ErrorIs(t, f.Errs()[0], gxerr.Closed)
	require.Zero(t, src.Refs.Load())
	require.Zero(t, dst.Refs.Load())
}

// stopAsync runs the copier's Stop on a goroutine and waits (bounded)
// until Stop has begun; stopped is closed once Stop returns, began
// tells whether it began in time.
func (r *rig) stopAsync() (stopped <-chan struct{}, began bool) {
	done := make(chan struct{})
	go func() {
		r.c.Stop()
		close(done)
	}()
	for i := 0; i < 10000 && !r.c.stopping.Load(); i++ {
		time.Sleep(time.Millisecond)
	}
	return done, r.c.stopping.Load()
}
