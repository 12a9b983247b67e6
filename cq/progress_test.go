package cq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestActorSweepsOnProgress: an actor whose tickets carry a progress stamp
// polls them (WAIT_CS) only in sweeps where the stamp moved, or every
// sweepEvery+1 sweeps; a CS that ends moves the stamp and is retired. The
// stamp here is the count of CSs the fake source ended; its reads count
// the sweeps.
func TestActorSweepsOnProgress(t *testing.T) {
	w := newFakeWaiter()
	var ended atomic.Uint64
	var reads atomic.Int64
	progress := func() (uint64, bool) {
		reads.Add(1)
		return ended.Load(), true
	}
	// A spin window longer than the test: the actor sweeps all along
	// instead of blocking in WAIT_CS.
	a := NewDeviceActor("fake", w, ActorConfig{Spin: time.Minute, BlockTimeout: time.Millisecond})
	defer a.Close(0)
	done := make(chan error, 1)
	require.NoError(t, a.Track(context.Background(), Submission{Seq: 1, Progress: progress, OnDone: func(err error) { done <- err }}))

	require.Eventually(t, func() bool { return reads.Load() >= 50*(sweepEvery+1) }, time.Minute, time.Millisecond)
	polls, n := a.Stats().Polls, reads.Load()
	require.LessOrEqual(t, int64(polls), n/(sweepEvery+1)+2, "%d polls in %d sweeps with the stamp still", polls, n)

	w.finish(1, nil)
	ended.Add(1)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the CS that moved the stamp was not retired")
	}
}

// TestActorSweepsEveryWindowOnProgress: with more tickets than MaxPoll, a
// sweep polls one window of them, the windows taking turns. A stamp that
// moved must get every window polled, not only the one of the sweep that
// saw it move: else a CS of another window that ended is retired only
// when a later move happens to be seen in a sweep of its window, and the
// every-8th sweep, on a fixed turn of the windows, may never be one. Here
// 4 tickets in windows of 2 take turns every other sweep, and the stamp
// moves in every other sweep (as under a steady stream of other
// completions): each ticket that ends must be retired, whichever window
// holds it (without the fix those of the window the moves never fell on
// never were).
func TestActorSweepsEveryWindowOnProgress(t *testing.T) {
	for end := uint64(1); end <= 4; end++ {
		t.Run(fmt.Sprintf("seq%d", end), func(t *testing.T) {
			w := newFakeWaiter()
			var reads atomic.Int64
			progress := func() (uint64, bool) {
				return uint64(reads.Add(1) / 2), true // moves in even sweeps
			}
			a := NewDeviceActor("fake", w, ActorConfig{Spin: time.Minute, BlockTimeout: time.Millisecond, MaxPoll: 2})
			defer a.Close(0)
			done := make(chan uint64, 4)
			for seq := uint64(1); seq <= 4; seq++ {
				require.NoError(t, a.Track(context.Background(), Submission{Seq: seq, Progress: progress, OnDone: func(error) { done <- seq }}))
			}
			// All four in the actor's sweeps.
			r0 := reads.Load()
			require.Eventually(t, func() bool { return reads.Load() >= r0+20 }, time.Minute, time.Millisecond)

			w.finish(end, nil)
			r1 := reads.Load()
			require.Eventually(t, func() bool { return len(done) > 0 || reads.Load() > r1+1000 }, time.Minute, time.Millisecond)
			select {
			case seq := <-done:
				require.Equal(t, end, seq)
			default:
				t.Fatalf("CS %d ended and was not retired in %d sweeps", end, reads.Load()-r1)
			}
			for seq := uint64(1); seq <= 4; seq++ {
				if seq != end {
					w.finish(seq, nil)
				}
			}
		})
	}
}
