package cq

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPollOnDoneTracksWhileClosing: an OnDone run by Ticket.Poll may
// Track (or Poll) on the same actor while Close makes the actor refuse
// submissions. Poll used to hold the actor's exit lock (a read lock)
// while OnDone ran: the actor's refuse then waited for it, and the
// Track's read lock waited behind that writer (sync.RWMutex), so the
// waiter, the actor and Close hung for ever.
func TestPollOnDoneTracksWhileClosing(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{})
	release := stallActor(t, a, w, 1)
	defer release()

	closed := make(chan struct{})
	tracked := make(chan error, 1)
	tk, err := a.TrackTicket(context.Background(), Submission{Seq: 2, OnDone: func(error) {
		go func() { a.Close(0); close(closed) }()
		release()
		// Until the actor, its stall over, refuses submissions or waits
		// to (a writer is pending on the exit lock).
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); runtime.Gosched() {
			if !a.exitMu.TryRLock() {
				break
			}
			refused := a.refused || a.exited
			a.exitMu.RUnlock()
			if refused {
				break
			}
		}
		tracked <- a.Track(context.Background(), Submission{Seq: 3, OnDone: func(error) {}})
	}})
	require.NoError(t, err)
	w.finish(2, nil)
	polled := make(chan bool, 1)
	go func() { polled <- tk.Poll() }()
	select {
	case ok := <-polled:
		require.True(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("Poll's OnDone hung in Track while the actor closed")
	}
	require.ErrorIs(t, <-tracked, ErrClosed)
	recvWithin(t, closed, "closed")
}
