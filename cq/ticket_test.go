package cq

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stallActor makes a's goroutine hang in the OnDone of an already
// retired CS (seq) until the returned release is called.
func stallActor(t *testing.T, a *DeviceActor, w *fakeWaiter, seq uint64) (release func()) {
	t.Helper()
	stalled, rel := make(chan struct{}), make(chan struct{})
	w.finish(seq, nil)
	require.NoError(t, a.Track(context.Background(), Submission{Seq: seq, OnDone: func(error) {
		close(stalled)
		<-rel
	}}))
	<-stalled
	var once sync.Once
	return func() { once.Do(func() { close(rel) }) }
}

// TestTicketPollRetiresOnWaiter: a waiter that polls its ticket retires
// the CS on its own goroutine, with the actor busy elsewhere; the actor
// then only drops it.
func TestTicketPollRetiresOnWaiter(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{})
	defer a.Close(0)
	release := stallActor(t, a, w, 1)
	defer release()

	var ran atomic.Int32
	tk, err := a.TrackTicket(context.Background(), Submission{Seq: 2, OnDone: func(err error) {
		require.NoError(t, err) // runs on the test goroutine (Poll)
		ran.Add(1)
	}})
	require.NoError(t, err)
	require.False(t, tk.Poll(), "CS 2 has not ended")
	require.False(t, tk.Retired())
	w.finish(2, nil)
	require.True(t, tk.Poll())
	require.Equal(t, int32(1), ran.Load(), "OnDone ran in Poll, the actor being stalled")
	require.True(t, tk.Retired())
	require.True(t, tk.Poll(), "a retired ticket stays retired")
	st := a.Stats()
	require.Equal(t, uint64(1), st.WaiterRetired)
	require.Equal(t, 0, st.Outstanding, "CS 1 is counted out before its (stalled) OnDone, CS 2 retired")

	release()
	require.Eventually(t, func() bool { return a.Outstanding() == 0 }, 10*time.Second, time.Millisecond)
	require.Equal(t, int32(1), ran.Load(), "the actor did not run OnDone again")
	var nilTicket *Ticket
	require.True(t, nilTicket.Poll())
}

// TestTicketRetiredOnce: tickets polled by waiters while the actor polls
// them too, and the rest ended by Close, each get exactly one OnDone.
func TestTicketRetiredOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     ActorConfig
		pollers int
	}{
		{"spinning actor", ActorConfig{}, 2},
		{"blocking actor", ActorConfig{Spin: -1, BlockTimeout: time.Microsecond}, 2},
		{"one poller", ActorConfig{MaxPoll: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWaiter()
			a := NewDeviceActor("fake", w, tc.cfg)
			const n = 300
			calls := make([]atomic.Int32, n+1)
			tickets := make([]*Ticket, 0, n)
			for i := uint64(1); i <= n; i++ {
				tk, err := a.TrackTicket(context.Background(), Submission{Seq: i, OnDone: func(error) { calls[i].Add(1) }})
				require.NoError(t, err)
				tickets = append(tickets, tk)
			}
			var wg sync.WaitGroup
			for p := range tc.pollers {
				wg.Go(func() {
					for k := p; k < len(tickets); k += tc.pollers {
						for !tickets[k].Poll() && tickets[k].Seq <= n-20 {
						}
					}
				})
			}
			for i := uint64(1); i <= n-20; i++ { // the last 20 never end
				w.finish(i, nil)
			}
			wg.Wait()
			a.Close(0)
			for i := uint64(1); i <= n; i++ {
				require.Equal(t, int32(1), calls[i].Load(), "seq %d", i)
				require.True(t, tickets[i-1].Poll(), "after Close every ticket is retired")
			}
			require.Equal(t, 0, a.Outstanding())
			require.Equal(t, uint64(n), a.Stats().Retired)
		})
	}
}

// TestTicketPollLeavesTimeoutAlone: while the actor runs a ticket's
// OnTimeout, a waiter does not retire it (OnDone never overlaps
// OnTimeout); once OnTimeout returned, the CS retires normally.
func TestTicketPollLeavesTimeoutAlone(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{})
	defer a.Close(0)
	inTimeout, leave := make(chan struct{}), make(chan struct{})
	var timingOut, overlap atomic.Bool
	done := make(chan error, 1)
	tk, err := a.TrackTicket(context.Background(), Submission{
		Seq: 1, Deadline: time.Now(),
		OnTimeout: func(time.Time) time.Time {
			timingOut.Store(true)
			close(inTimeout)
			<-leave
			timingOut.Store(false)
			return time.Time{}
		},
		OnDone: func(err error) {
			if timingOut.Load() {
				overlap.Store(true)
			}
			done <- err
		},
	})
	require.NoError(t, err)
	<-inTimeout
	w.finish(1, nil)
	require.False(t, tk.Poll(), "OnTimeout is running")
	close(leave)
	for !tk.Poll() {
	}
	require.NoError(t, <-done)
	require.False(t, overlap.Load())
}

// TestActorSleepsWhileWaitersPoll: while a waiter watches every tracked
// CS, the actor sleeps instead of spin-polling them (here its spin window
// would last an hour); once a waiter retired what it saw, the actor parks
// at once instead of spinning for submissions.
func TestActorSleepsWhileWaitersPoll(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{Spin: time.Hour, BlockTimeout: time.Millisecond})
	defer a.Close(0)
	// The actor is spinning (its window started when it did).
	tk, err := a.TrackTicket(context.Background(), Submission{Seq: 1, OnDone: func(error) {}})
	require.NoError(t, err)
	tk.Watch()
	for a.Stats().Sleeps == 0 { // within the spin window: only because watched
		runtime.Gosched()
	}
	require.False(t, tk.Poll())
	parks := a.Stats().Parks
	w.finish(1, nil)
	require.True(t, tk.Poll())
	tk.Unwatch()
	require.Eventually(t, func() bool { return a.Stats().Parks > parks }, 30*time.Second, time.Millisecond,
		"the actor parks although its spin window is not over")
	require.Zero(t, a.Outstanding())
	require.Equal(t, uint64(1), a.Stats().WaiterRetired)
}

// TestActorLeavesWatchedToWaiter: a CS that ended while a waiter watches
// it is retired by that waiter, not by the actor (which would hand the
// completion over once more): the actor passes over it again and again;
// once unwatched, the actor retires what is left.
func TestActorLeavesWatchedToWaiter(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{Spin: time.Hour, BlockTimeout: time.Microsecond})
	defer a.Close(0)
	tk, err := a.TrackTicket(context.Background(), Submission{Seq: 1, OnDone: func(error) {}})
	require.NoError(t, err)
	tk.Watch()
	w.finish(1, nil)
	sleeps := a.Stats().Sleeps
	for a.Stats().Sleeps < sleeps+100 && !tk.Retired() { // the actor has passed over CS 1 many times
		runtime.Gosched()
	}
	require.False(t, tk.Retired(), "left to its waiter")
	require.True(t, tk.Poll())
	tk.Unwatch()
	require.Equal(t, uint64(1), a.Stats().WaiterRetired)

	// Unwatched, the actor retires it.
	done := make(chan struct{})
	tk2, err := a.TrackTicket(context.Background(), Submission{Seq: 2, OnDone: func(error) { close(done) }})
	require.NoError(t, err)
	tk2.Watch()
	w.finish(2, nil)
	tk2.Unwatch()
	<-done
	require.Equal(t, uint64(1), a.Stats().WaiterRetired)
}

// onceWaiter reports an ended CS's outcome once, then COMPLETED (as
// Gaudi3's direct mode and the driver's outcome store do).
type onceWaiter struct {
	*fakeWaiter
	mu       sync.Mutex
	reported map[uint64]bool
}

func (o *onceWaiter) WaitCS(seq uint64, timeout time.Duration) (bool, error) {
	done, err := o.fakeWaiter.WaitCS(seq, timeout)
	if !done {
		return false, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.reported[seq] {
		return true, nil
	}
	o.reported[seq] = true
	return true, err
}

// TestTicketOutcomeReportedOnce: with a completion source that reports
// an outcome once, the CS's error reaches OnDone whether a waiter or the
// actor saw it end, also when both poll at once (whoever polls holds the
// ticket).
func TestTicketOutcomeReportedOnce(t *testing.T) {
	csErr := errors.New("aborted")
	for _, watch := range []bool{false, true} {
		t.Run(fmt.Sprintf("watched=%v", watch), func(t *testing.T) {
			w := &onceWaiter{fakeWaiter: newFakeWaiter(), reported: map[uint64]bool{}}
			a := NewDeviceActor("fake", w, ActorConfig{BlockTimeout: time.Microsecond})
			defer a.Close(0)
			const n = 200
			errs := make([]error, n+1)
			var ended atomic.Int32 // OnDones returned (Outstanding drops before each runs)
			var wg sync.WaitGroup
			for i := uint64(1); i <= n; i++ {
				tk, err := a.TrackTicket(context.Background(), Submission{Seq: i, OnDone: func(err error) { errs[i] = err; ended.Add(1) }})
				require.NoError(t, err)
				if watch {
					tk.Watch()
				}
				wg.Go(func() {
					for !tk.Poll() {
						runtime.Gosched()
					}
				})
				w.finish(i, csErr)
			}
			wg.Wait()
			require.Eventually(t, func() bool { return ended.Load() == n }, 30*time.Second, time.Millisecond)
			for i := uint64(1); i <= n; i++ {
				require.ErrorIs(t, errs[i], csErr, "seq %d", i)
			}
		})
	}
}

// TestActorWatchSleepWakes: while waiters watch every CS it tracks, the
// actor sleeps without looking at new submissions (here for up to an
// hour: BlockTimeout); what needs it wakes it. Each case fails (times
// out) if that wake-up is missing.
func TestActorWatchSleepWakes(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, a *DeviceActor, w *fakeWaiter, watched *Ticket)
	}{
		{"a waiter leaving a CS it did not retire", func(t *testing.T, a *DeviceActor, w *fakeWaiter, watched *Ticket) {
			w.finish(1, nil)
			watched.Unwatch() // without having polled it again
			require.Eventually(t, watched.Retired, 10*time.Second, time.Millisecond, "retired by the actor")
		}},
		{"a submission nobody watches, kicked", func(t *testing.T, a *DeviceActor, w *fakeWaiter, watched *Ticket) {
			done := make(chan struct{})
			tk, err := a.TrackTicket(context.Background(), Submission{Seq: 2, OnDone: func(error) { close(done) }})
			require.NoError(t, err)
			w.finish(2, nil)
			tk.Kick()
			recvWithin(t, done, "retired once kicked")
			require.True(t, tk.Retired())
			w.finish(1, nil)
			require.True(t, watched.Poll())
			watched.Unwatch()
		}},
		{"a Track, whose submission nobody can watch or kick", func(t *testing.T, a *DeviceActor, w *fakeWaiter, watched *Ticket) {
			done := make(chan struct{})
			w.finish(2, nil)
			require.NoError(t, a.Track(context.Background(), Submission{Seq: 2, OnDone: func(error) { close(done) }}))
			recvWithin(t, done, "retired while a waiter watches another CS")
			w.finish(1, nil)
			require.True(t, watched.Poll())
			watched.Unwatch()
		}},
		{"a full submission queue", func(t *testing.T, a *DeviceActor, w *fakeWaiter, watched *Ticket) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for seq := uint64(2); seq <= 2+uint64(cap(a.in)); seq++ { // one more than a.in holds
				_, err := a.TrackTicket(ctx, Submission{Seq: seq, OnDone: func(error) {}})
				require.NoError(t, err)
				w.finish(seq, nil)
			}
			w.finish(1, nil)
			require.True(t, watched.Poll())
			watched.Unwatch()
		}},
		{"a deadline", func(t *testing.T, a *DeviceActor, w *fakeWaiter, watched *Ticket) {
			timedOut := make(chan struct{})
			tk, err := a.TrackTicket(context.Background(), Submission{Seq: 2, Deadline: time.Now().Add(20 * time.Millisecond),
				OnDone: func(error) {}, OnTimeout: func(time.Time) time.Time { close(timedOut); return time.Time{} }})
			require.NoError(t, err)
			tk.Watch() // watched too: only the deadline needs the actor
			recvWithin(t, timedOut, "timed out at its deadline")
			w.finish(1, nil)
			w.finish(2, nil)
			// The actor holds the ticket until OnTimeout has returned.
			require.Eventually(t, tk.Poll, 10*time.Second, time.Millisecond)
			tk.Unwatch()
			watched.Unwatch()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWaiter()
			// A long spin window: the actor must not block on the first
			// CS (for BlockTimeout) before the test gets to watch it;
			// unwatched CSs are still polled in its sweeps.
			a := NewDeviceActor("fake", w, ActorConfig{Spin: time.Minute, BlockTimeout: time.Hour, MaxOutstanding: 4})
			defer a.Close(0)
			tk, err := a.TrackTicket(context.Background(), Submission{Seq: 1, OnDone: func(error) {}})
			require.NoError(t, err)
			asleepOnceWatched(t, a, tk)
			tc.run(t, a, w, tk)
			require.Eventually(t, func() bool { return a.Outstanding() == 0 }, 10*time.Second, time.Millisecond)
		})
	}
}

// asleepOnceWatched watches tk, the actor's only CS, and waits (10 s at
// most) for the actor to sleep. The sleep count is read before Watch: the
// actor may sleep as soon as tk is watched, and for BlockTimeout (an hour
// in these tests), so a count read after Watch could already include that
// sleep and wait for the next (CI hung on TestActorWatchSleepWakes so).
func asleepOnceWatched(t *testing.T, a *DeviceActor, tk *Ticket) {
	t.Helper()
	sleeps := a.Stats().Sleeps
	tk.Watch()
	require.Eventually(t, func() bool { return a.Stats().Sleeps != sleeps }, 10*time.Second, 50*time.Microsecond, "asleep once its CS is watched")
}

// recvWithin waits for ch to be closed, failing after 10 s.
func recvWithin(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("not " + what)
	}
}

// TestCloseGraceSleepsWhileWatched: in Close's grace an actor whose CSs
// are all watched keeps sleeping as it did before Close (until the grace
// ends), instead of looping on the closed stop channel and burning a
// core for the whole grace.
func TestCloseGraceSleepsWhileWatched(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{Spin: time.Minute, BlockTimeout: time.Hour})
	tk, err := a.TrackTicket(context.Background(), Submission{Seq: 1, OnDone: func(error) {}})
	require.NoError(t, err)
	asleepOnceWatched(t, a, tk)
	defer tk.Unwatch()
	const grace = 200 * time.Millisecond
	start := time.Now()
	before := a.Stats().Sleeps
	a.Close(grace)
	require.GreaterOrEqual(t, time.Since(start), grace, "the grace is kept")
	require.True(t, tk.Retired(), "ended at the grace's end")
	require.LessOrEqual(t, a.Stats().Sleeps-before, uint64(3), "sleeps in the grace")
}

// TestPollWhileCloseEndsTickets: while Close ends the tickets left at the
// grace's end, Poll reports a ticket retired only once its OnDone has
// been claimed. It used to report every ticket retired as soon as the
// actor began ending them, before their OnDone ran.
func TestPollWhileCloseEndsTickets(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{})
	inFirst, leave := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(leave) })
	defer release()
	t1, err := a.TrackTicket(context.Background(), Submission{Seq: 1, OnDone: func(error) {
		close(inFirst)
		<-leave
	}})
	require.NoError(t, err)
	var ran2 atomic.Bool
	t2, err := a.TrackTicket(context.Background(), Submission{Seq: 2, OnDone: func(error) { ran2.Store(true) }})
	require.NoError(t, err)
	closed := make(chan struct{})
	go func() { a.Close(0); close(closed) }()
	defer func() { release(); <-closed }()
	<-inFirst // the actor ends ticket 1 and holds on in its OnDone
	require.True(t, t1.Retired())
	require.Equal(t, t2.Retired(), t2.Poll(), "Poll agrees with Retired")
	require.False(t, t2.Poll() && !ran2.Load(), "Poll reported ticket 2 retired before its OnDone was claimed")
	release()
	<-closed
	require.True(t, t2.Poll())
	require.True(t, ran2.Load())
}
