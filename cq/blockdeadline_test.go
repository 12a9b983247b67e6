package cq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeadlineTrackedDuringBlock: a submission tracked while the actor
// blocks in WAIT_CS on another CS (ActorConfig.BlockTimeout, an hour
// here) times out at its deadline, not when that blocking wait ends. The
// actor used to look at deadlines only between its waits: a CS tracked
// during one had its deadline kept up to BlockTimeout late.
func TestDeadlineTrackedDuringBlock(t *testing.T) {
	w := newFakeWaiter()
	blocking := make(chan struct{}, 1)
	w.armed = func() { // mu held: a blocking WaitCS is about to wait
		select {
		case blocking <- struct{}{}:
		default:
		}
	}
	a := NewDeviceActor("fake", w, ActorConfig{Spin: -1, BlockTimeout: time.Hour})
	defer a.Close(0)
	defer w.finish(1, nil) // before Close: ends the blocking WAIT_CS
	require.NoError(t, a.Track(context.Background(), Submission{Seq: 1, OnDone: func(error) {}}))
	recvWithin(t, blocking, "blocking on CS 1")

	timedOut, done := make(chan struct{}), make(chan error, 1)
	require.NoError(t, a.Track(context.Background(), Submission{
		Seq: 2, Deadline: time.Now().Add(5 * time.Millisecond),
		OnTimeout: func(time.Time) time.Time { close(timedOut); return time.Time{} },
		OnDone:    func(err error) { done <- err },
	}))
	recvWithin(t, timedOut, "timed out at its deadline during the actor's blocking wait")
	select {
	case err := <-done:
		t.Fatalf("CS 2 retired (%v) before it ended", err)
	default:
	}
	w.finish(2, nil) // it still retires (once the blocking wait ended)
	w.finish(1, nil)
	require.NoError(t, <-done)
}
