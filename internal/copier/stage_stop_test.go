package copier

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gxerr"
)

// TestStageStopRefusesNextChunk: a copy between devices of several
// staging chunks starts no further chunk once Stop has begun: it ends
// with ErrClosed once the chunk under way has finished (stageCopy frees
// the bounce buffers only after its inner copies have resolved). Stop is held between its start and the
// closing of the device queues (a device reopen it waits for); before the
// fix the copy went on with its next chunks there, its inner copies still
// taken by the open queues, and succeeded.
func TestStageStopRefusesNextChunk(t *testing.T) {
	const n = 3 * StageChunk
	r := newRig(t, 2)
	src, dst := r.gaudi(t, 0, n), r.gaudi(t, 1, n)
	var allocs, frees atomic.Int32
	alloc, free := r.c.cfg.AllocHost, r.c.cfg.FreeHost
	r.c.cfg.AllocHost = func(sz int) (*Mem, error) {
		allocs.Add(1)
		return alloc(sz)
	}
	r.c.cfg.FreeHost = func(m *Mem) error {
		frees.Add(1)
		return free(m)
	}
	// The inner copies run on the staging task's goroutine (the queues
	// are idle): the second CS submitted is chunk 0's host-to-device
	// copy, the last step of that chunk; the next CS would start chunk 1.
	var calls, afterStop atomic.Int32
	held, resume := make(chan struct{}), make(chan struct{})
	hook := func(uint64) {
		stopped := r.c.stopping.Load()
		if calls.Add(1) == 2 {
			close(held)
			<-resume
			return
		}
		if stopped {
			afterStop.Add(1)
		}
	}
	r.c.HookSubmitted.Store(&hook)
	src.Refs.Add(1)
	dst.Refs.Add(1)
	f := NewFuture(1)
	require.NoError(t, r.c.Copy(context.Background(), f, Slice{M: dst, N: n}, Slice{M: src, N: n}, time.Time{}))
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		close(resume)
		require.FailNow(t, "chunk 0's host-to-device copy was not submitted")
	}
	// Hold Stop after its start, before it closes the device queues.
	r.c.re.wg.Add(1)
	stopped, began := r.stopAsync()
	submitted := calls.Load()
	close(resume)
	waitErr := f.Wait(context.Background())
	r.c.re.wg.Done()
	<-stopped
	require.True(t, began, "Stop began")
	require.Equal(t, int32(2), submitted, "the copy did not wait in chunk 0's submission")
	require.Zero(t, afterStop.Load(), "chunks started after Stop began")
	require.ErrorIs(t, waitErr, gxerr.Closed)
	require.Equal(t, int32(2), allocs.Load(), "bounce buffers allocated")
	require.Equal(t, allocs.Load(), frees.Load(), "bounce buffers freed")
	require.Zero(t, src.Refs.Load())
	require.Zero(t, dst.Refs.Load())
}
