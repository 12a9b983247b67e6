package cq

import (
	"context"
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
