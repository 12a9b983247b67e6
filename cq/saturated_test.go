package cq

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitSleep waits (up to 100 ms) for the actor to sleep once more than
// sleeps.
func waitSleep(a *DeviceActor, sleeps uint64) {
	for end := time.Now().Add(100 * time.Millisecond); a.Stats().Sleeps <= sleeps && time.Now().Before(end); {
		runtime.Gosched()
	}
}

// TestSaturatedActorWakesOnWaiterRetire: the actor holds MaxOutstanding
// submissions, every one watched by a waiter, and sleeps; a submission
// queued behind them (kicked: its caller blocks, or Track found the queue
// full) cannot enter until a waiter retires one. The waiter's retirement
// wakes the actor. Without that, the queued CS ended but stayed unretired,
// or Track stayed blocked, for BlockTimeout (an hour here).
func TestSaturatedActorWakesOnWaiterRetire(t *testing.T) {
	for _, tc := range []struct {
		name string
		// queue puts a submission behind the watched one; it returns a
		// channel that yields once that submission is retired or tracked.
		queue func(t *testing.T, a *DeviceActor, w *fakeWaiter) <-chan struct{}
	}{
		{"kicked submission", func(t *testing.T, a *DeviceActor, w *fakeWaiter) <-chan struct{} {
			done := make(chan struct{})
			tk, err := a.TrackTicket(context.Background(), Submission{Seq: 2, OnDone: func(error) { close(done) }})
			require.NoError(t, err)
			w.finish(2, nil)
			sleeps := a.Stats().Sleeps
			tk.Kick()            // its caller blocks on a channel (Future.Done)
			waitSleep(a, sleeps) // woken, the actor found no room and slept again
			return done
		}},
		{"blocked Track", func(t *testing.T, a *DeviceActor, w *fakeWaiter) <-chan struct{} {
			_, err := a.TrackTicket(context.Background(), Submission{Seq: 2, OnDone: func(error) {}}) // fills the queue
			require.NoError(t, err)
			w.finish(2, nil)
			sleeps := a.Stats().Sleeps
			tracked := make(chan struct{})
			go func() {
				defer close(tracked)
				_, _ = a.TrackTicket(context.Background(), Submission{Seq: 3, OnDone: func(error) {}})
			}()
			waitSleep(a, sleeps) // kicked by the full Track, it slept again
			w.finish(3, nil)
			return tracked
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWaiter()
			// A long spin window: the actor must not block on the first
			// CS (for BlockTimeout) before the test gets to watch it.
			a := NewDeviceActor("fake", w, ActorConfig{Spin: time.Minute, BlockTimeout: time.Hour, MaxOutstanding: 1})
			defer a.Close(0)
			tk1, err := a.TrackTicket(context.Background(), Submission{Seq: 1, OnDone: func(error) {}})
			require.NoError(t, err)
			tk1.Watch()
			for a.Stats().Sleeps == 0 {
				runtime.Gosched()
			}
			ready := tc.queue(t, a, w)
			w.finish(1, nil)
			require.True(t, tk1.Poll(), "the waiter retires its own CS")
			tk1.Unwatch()
			select {
			case <-ready:
			case <-time.After(5 * time.Second):
				t.Fatalf("the queued submission waits for the sleeping actor 5 s after the waiter made room; stats %+v", a.Stats())
			}
		})
	}
}

// allDone reports every CS ended.
type allDone struct{}

func (allDone) WaitCS(uint64, time.Duration) (bool, error) { return true, nil }

// TestCloseGraceCoversLateTracks: a submission Track accepts while Close
// begins is polled in the grace like the others: its CS has ended, so it
// retires with nil, never ErrClosed. (The actor found nothing pending and
// exited, and its exit ended a submission that had just entered with
// ErrClosed without a poll: the copier then released the memory of a CS
// the device might still run.)
func TestCloseGraceCoversLateTracks(t *testing.T) {
	var closedEnds, accepted atomic.Int64
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) && closedEnds.Load() == 0 {
		a := NewDeviceActor("fake", allDone{}, ActorConfig{Spin: -1})
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				<-start
				for seq := uint64(1); ; seq++ {
					_, err := a.TrackTicket(context.Background(), Submission{Seq: seq, OnDone: func(err error) {
						if errors.Is(err, ErrClosed) {
							closedEnds.Add(1)
						}
					}})
					if err != nil {
						return
					}
					accepted.Add(1)
				}
			})
		}
		close(start)
		time.Sleep(20 * time.Microsecond)
		a.Close(time.Minute)
		wg.Wait()
	}
	require.Zero(t, closedEnds.Load(), "accepted submissions of ended CSs ended with ErrClosed (%d accepted)", accepted.Load())
}

// neverDone is a CS that never ends; blocking waits sleep their timeout.
// It counts the blocking waits of a millisecond or more that begin once
// late is set.
type neverDone struct {
	blocked    chan struct{} // closed at the first blocking wait
	once       sync.Once
	late       atomic.Bool
	lateBlocks atomic.Int64
}

func (w *neverDone) WaitCS(_ uint64, timeout time.Duration) (bool, error) {
	if timeout > 0 {
		if w.late.Load() && timeout >= time.Millisecond {
			w.lateBlocks.Add(1)
		}
		w.once.Do(func() { close(w.blocked) })
		time.Sleep(timeout)
	}
	return false, nil
}

// TestCloseGraceBoundsBlockingWait: once Close has begun, the actor's
// blocking WAIT_CS on an unwatched CS lasts no longer than what is left
// of the grace. It used to take a whole BlockTimeout more: Close(0)
// called while the actor blocked returned only after a second block.
func TestCloseGraceBoundsBlockingWait(t *testing.T) {
	w := &neverDone{blocked: make(chan struct{})}
	a := NewDeviceActor("fake", w, ActorConfig{Spin: -1, BlockTimeout: 300 * time.Millisecond})
	ended := make(chan error, 1)
	require.NoError(t, a.Track(context.Background(), Submission{Seq: 1, OnDone: func(err error) { ended <- err }}))
	<-w.blocked // the actor sleeps in its first blocking wait
	w.late.Store(true)
	a.Close(0)
	require.ErrorIs(t, <-ended, ErrClosed)
	require.Zero(t, w.lateBlocks.Load(), "blocking waits begun after Close(0)")
}
