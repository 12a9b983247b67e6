package cq

import (
	"context"
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
	require.Equal(t, 1, st.Outstanding, "only the stalled CS 1")

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

// gatedWaiter is a fakeWaiter whose blocking WaitCS calls announce
// themselves and return "not done" once the gate opens.
type gatedWaiter struct {
	*fakeWaiter
	blocking chan struct{}
	gate     chan struct{}
}

func (g *gatedWaiter) WaitCS(seq uint64, timeout time.Duration) (bool, error) {
	if timeout <= 0 {
		return g.fakeWaiter.WaitCS(seq, 0)
	}
	select {
	case g.blocking <- struct{}{}:
	default:
	}
	<-g.gate
	return false, nil
}

// TestActorSleepsWhileWaitersPoll: while a waiter watches every tracked
// CS, the actor sleeps in a blocking WAIT_CS instead of spin-polling them
// (here its spin window would last an hour); once a waiter retired what
// it saw, the actor parks at once instead of spinning for submissions.
func TestActorSleepsWhileWaitersPoll(t *testing.T) {
	w := &gatedWaiter{fakeWaiter: newFakeWaiter(), blocking: make(chan struct{}, 1), gate: make(chan struct{})}
	a := NewDeviceActor("fake", w, ActorConfig{Spin: time.Hour, BlockTimeout: time.Hour})
	defer a.Close(0)
	var once sync.Once
	open := func() { once.Do(func() { close(w.gate) }) }
	defer open()
	// The actor is spinning (its window started when it did).
	tk, err := a.TrackTicket(context.Background(), Submission{Seq: 1, OnDone: func(error) {}})
	require.NoError(t, err)
	tk.Watch()
	select {
	case <-w.blocking: // within the spin window: only because watched
	case <-time.After(30 * time.Second):
		t.Fatal("the actor keeps spinning on a watched CS")
	}
	require.False(t, tk.Poll())
	parks := a.Stats().Parks
	w.finish(1, nil)
	require.True(t, tk.Poll(), "the actor is held in its blocking WaitCS")
	tk.Unwatch()
	open()
	require.Eventually(t, func() bool { return a.Stats().Parks > parks }, 30*time.Second, time.Millisecond,
		"the actor parks although its spin window is not over")
	require.Zero(t, a.Outstanding())
}
