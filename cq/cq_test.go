package cq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// recCompleter records completions (the engine's futures implement
// Completer for real).
type recCompleter struct {
	mu   sync.Mutex
	n    int
	errs map[int]error
	done chan struct{}
}

func newRec(n int) *recCompleter {
	return &recCompleter{n: n, errs: map[int]error{}, done: make(chan struct{})}
}

func (r *recCompleter) Complete(idx int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs[idx] = err
	}
	if r.n--; r.n == 0 {
		close(r.done)
	}
}

// fakeWaiter completes sequence numbers when told to.
type fakeWaiter struct {
	mu   sync.Mutex
	cond *sync.Cond
	res  map[uint64]error // present = retired
	// armed (tests of the fake) runs with mu held once a blocking WaitCS
	// has armed its timer, before it waits.
	armed func()
}

func newFakeWaiter() *fakeWaiter {
	w := &fakeWaiter{res: map[uint64]error{}}
	w.cond = sync.NewCond(&w.mu)
	return w
}

func (w *fakeWaiter) finish(seq uint64, err error) {
	w.mu.Lock()
	w.res[seq] = err
	w.mu.Unlock()
	w.cond.Broadcast()
}

func (w *fakeWaiter) WaitCS(seq uint64, timeout time.Duration) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err, ok := w.res[seq]; ok {
		return true, err
	}
	if timeout <= 0 {
		return false, nil
	}
	// The timer marks expiry under mu: a timer that fires before this
	// goroutine waits is seen by the loop's check, not lost.
	expired := false
	t := time.AfterFunc(timeout, func() {
		w.mu.Lock()
		expired = true
		w.mu.Unlock()
		w.cond.Broadcast()
	})
	defer t.Stop()
	if w.armed != nil {
		w.armed()
	}
	for {
		if err, ok := w.res[seq]; ok {
			return true, err
		}
		if expired {
			return false, nil
		}
		w.cond.Wait()
	}
}

// TestFakeWaiterTimerBeforeWait: a blocking WaitCS whose timer fires before
// it waits still returns (it used to Broadcast with nobody waiting and
// then wait for ever: a lost wake-up that hung the actor tests).
func TestFakeWaiterTimerBeforeWait(t *testing.T) {
	w := newFakeWaiter()
	w.armed = func() { time.Sleep(5 * time.Millisecond) } // the 1 µs timer fires here
	ret := make(chan bool, 1)
	go func() {
		done, _ := w.WaitCS(1, time.Microsecond)
		ret <- done
	}()
	select {
	case done := <-ret:
		require.False(t, done)
	case <-time.After(10 * time.Second):
		w.finish(1, nil) // unblock the lost waiter before failing
		<-ret
		t.Fatal("WaitCS missed its timeout: lost wake-up")
	}
}

func TestDeviceActorRetires(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{Spin: -1, BlockTimeout: time.Millisecond})
	defer a.Close(0)
	csErr := errors.New("cs failed")
	const n = 50
	results := make(chan error, n)
	for i := uint64(1); i <= n; i++ {
		require.NoError(t, a.Track(context.Background(), Submission{Seq: i, OnDone: func(err error) { results <- err }}))
	}
	for i := uint64(n); i >= 1; i-- { // retire out of order
		if i == 7 {
			w.finish(i, csErr)
		} else {
			w.finish(i, nil)
		}
	}
	failed := 0
	for i := 0; i < n; i++ {
		if err := <-results; err != nil {
			require.ErrorIs(t, err, csErr)
			failed++
		}
	}
	require.Equal(t, 1, failed)
	require.Eventually(t, func() bool { return a.Outstanding() == 0 }, 5*time.Second, time.Millisecond)
}

func TestDeviceActorDeadline(t *testing.T) {
	w := newFakeWaiter()
	// OnDeadline runs after the pass's OnTimeout calls: wait for it, not
	// for OnTimeout (the actor may still be between the two).
	checked := make(chan struct{}, 1)
	a := NewDeviceActor("fake", w, ActorConfig{OnDeadline: func() {
		select {
		case checked <- struct{}{}:
		default:
		}
	}})
	defer a.Close(0)
	timedOut := make(chan struct{})
	done := make(chan error, 1)
	require.NoError(t, a.Track(context.Background(), Submission{
		Seq: 1, Deadline: time.Now().Add(time.Millisecond),
		OnTimeout: func(time.Time) time.Time { close(timedOut); return time.Time{} },
		OnDone:    func(err error) { done <- err },
	}))
	<-timedOut
	<-checked
	w.finish(1, nil) // the CS still retires later
	require.NoError(t, <-done)
}

// TestDeviceActorDeadlineDuringBlock: a deadline falling while the actor
// blocks in WAIT_CS on the CS fires then, not when the blocking wait
// (ActorConfig.BlockTimeout, an hour here) ends.
func TestDeviceActorDeadlineDuringBlock(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{Spin: -1, BlockTimeout: time.Hour})
	defer a.Close(0)
	defer w.finish(1, nil) // before Close: ends a blocking WAIT_CS still under way
	timedOut := make(chan struct{})
	require.NoError(t, a.Track(context.Background(), Submission{
		Seq: 1, Deadline: time.Now().Add(20 * time.Millisecond),
		OnTimeout: func(time.Time) time.Time { close(timedOut); return time.Time{} },
		OnDone:    func(error) {},
	}))
	recvWithin(t, timedOut, "timed out at its deadline")
}

func TestDeviceActorCloseEndsOutstanding(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{})
	done := make(chan error, 3)
	for i := uint64(1); i <= 3; i++ {
		require.NoError(t, a.Track(context.Background(), Submission{Seq: i, OnDone: func(err error) { done <- err }}))
	}
	w.finish(2, nil)
	a.Close(5 * time.Millisecond)
	a.Close(0)
	got := map[error]int{}
	for i := 0; i < 3; i++ {
		got[<-done]++
	}
	require.Equal(t, 1, got[nil])
	require.Equal(t, 2, got[ErrClosed])
	require.ErrorIs(t, a.Track(context.Background(), Submission{Seq: 9, OnDone: func(error) {}}), ErrClosed)
}

func TestDeviceActorCallbackPanic(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{})
	defer a.Close(0)
	ok := make(chan struct{})
	require.NoError(t, a.Track(context.Background(), Submission{Seq: 1, OnDone: func(error) { panic("boom") }}))
	require.NoError(t, a.Track(context.Background(), Submission{Seq: 2, OnDone: func(error) { close(ok) }}))
	w.finish(1, nil)
	w.finish(2, nil)
	<-ok
}

func TestHostActor(t *testing.T) {
	h := NewHostActor(4)
	f := newRec(100)
	var thens atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var err error
			if i == 42 {
				err = ErrClosed
			}
			h.Post(HostCompletion{F: f, Idx: i, Err: err, Then: func() { thens.Add(1) }})
		}(i)
	}
	wg.Wait()

	<-f.done
	require.Len(t, f.errs, 1)
	require.ErrorIs(t, f.errs[42], ErrClosed)
	require.Equal(t, int32(100), thens.Load())
	h.Close()
	h.Close()
	g := newRec(1)
	h.Post(HostCompletion{F: g}) // after Close: applied inline
	select {
	case <-g.done:
	default:
		t.Fatal("a completion posted after Close is applied inline")
	}
}

// TestDeviceActorPollsBeyondWindow: a CS behind MaxPoll stuck ones is still
// reaped promptly (the poll window rotates) and is polled once before its
// deadline fires.
func TestDeviceActorPollsBeyondWindow(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{MaxPoll: 4, Spin: -1, BlockTimeout: time.Millisecond})
	defer a.Close(0)
	for i := uint64(1); i <= 8; i++ {
		require.NoError(t, a.Track(context.Background(), Submission{Seq: i, OnDone: func(error) {}}))
	}
	done := make(chan error, 1)
	timedOut := make(chan struct{}, 1)
	w.finish(9, nil) // already done when tracked
	require.NoError(t, a.Track(context.Background(), Submission{
		Seq: 9, Deadline: time.Now().Add(time.Hour),
		OnDone:    func(err error) { done <- err },
		OnTimeout: func(time.Time) time.Time { timedOut <- struct{}{}; return time.Time{} },
	}))
	require.NoError(t, <-done)
	require.Empty(t, timedOut)
	for i := uint64(1); i <= 8; i++ {
		w.finish(i, nil)
	}
}

// TestDeviceActorRearmsDeadline: OnTimeout's returned deadline is watched.
func TestDeviceActorRearmsDeadline(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{})
	defer a.Close(0)
	calls := make(chan time.Time, 4)
	n := 0
	require.NoError(t, a.Track(context.Background(), Submission{
		Seq: 1, Deadline: time.Now().Add(time.Millisecond),
		OnDone: func(error) {},
		OnTimeout: func(now time.Time) time.Time {
			calls <- now
			n++
			if n == 1 {
				return now.Add(5 * time.Millisecond)
			}
			return time.Time{}
		},
	}))
	first, second := <-calls, <-calls
	require.GreaterOrEqual(t, second.Sub(first), 5*time.Millisecond)
	w.finish(1, nil)
}

// TestDeviceActorTrackCloseRace: every accepted submission is ended, even
// when Track races Close.
func TestDeviceActorTrackCloseRace(t *testing.T) {
	for round := 0; round < 200; round++ {
		w := newFakeWaiter()
		a := NewDeviceActor("fake", w, ActorConfig{MaxOutstanding: 4})
		var accepted, ended atomic.Int32
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 4; i++ {
					if a.Track(context.Background(), Submission{Seq: uint64(100*g + i + 1), OnDone: func(error) { ended.Add(1) }}) == nil {
						accepted.Add(1)
					}
				}
			}(g)
		}
		a.Close(0)
		wg.Wait()
		require.Equal(t, accepted.Load(), ended.Load(), "round %d", round)
	}
}

// An actor with nothing outstanding keeps polling for submissions for
// its spin window before it parks: a Track within the window needs no
// wake-up. With no spin it parks at once.
func TestDeviceActorSpinsWhileIdle(t *testing.T) {
	tests := []struct {
		name      string
		spin      time.Duration
		wantParks bool
	}{
		{"spin window", 2 * time.Second, false},
		{"no spin", -1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWaiter()
			a := NewDeviceActor("fake", w, ActorConfig{Spin: tc.spin, BlockTimeout: time.Millisecond})
			defer a.Close(0)
			for seq := uint64(1); seq <= 2; seq++ {
				done := make(chan error, 1)
				require.NoError(t, a.Track(context.Background(), Submission{Seq: seq, OnDone: func(err error) { done <- err }}))
				w.finish(seq, nil)
				require.NoError(t, <-done)
				time.Sleep(10 * time.Millisecond) // idle between submissions, well within the window
			}
			st := a.Stats()
			require.Equal(t, uint64(2), st.Retired)
			require.Equal(t, tc.wantParks, st.Parks > 0, "parks: %d", st.Parks)
		})
	}
}

// TestHostActorCallbackPanics: a panicking Then completes its operation
// with ErrPanic, and a panicking Complete is dropped; the actor (and the
// process) goes on with the next records. Both used to crash the process.
func TestHostActorCallbackPanics(t *testing.T) {
	h := NewHostActor(4)
	defer h.Close()
	got := make(chan error, 3)
	ok := completerFunc(func(_ int, err error) { got <- err })
	h.Post(HostCompletion{F: ok, Then: func() { panic("then") }})
	h.Post(HostCompletion{F: completerFunc(func(int, error) { panic("complete") })})
	h.Post(HostCompletion{F: ok})
	h.Post(HostCompletion{Then: func() {}}) // no completer
	require.ErrorIs(t, <-got, ErrPanic)
	require.NoError(t, <-got, "the next record is applied")
}

type completerFunc func(int, error)

func (f completerFunc) Complete(i int, err error) { f(i, err) }

// TestOutstandingDroppedBeforeOnDone: when OnDone runs, its submission no
// longer counts in Outstanding and Stats, whoever retires it (the actor, a
// waiter's Poll, the actor's exit). The goroutine OnDone wakes goes on at
// once, and reads Outstanding to place its next submission (the engine
// puts a lone copy on the queue of the last one only when nothing is
// outstanding).
func TestOutstandingDroppedBeforeOnDone(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, a *DeviceActor, w *fakeWaiter, tk *Ticket)
		err  error
	}{
		{"actor", func(_ *testing.T, _ *DeviceActor, w *fakeWaiter, _ *Ticket) { w.finish(1, nil) }, nil},
		{"waiter", func(t *testing.T, _ *DeviceActor, w *fakeWaiter, tk *Ticket) {
			w.finish(1, nil)
			require.True(t, tk.Poll())
		}, nil},
		{"exit", func(_ *testing.T, a *DeviceActor, _ *fakeWaiter, _ *Ticket) { a.Close(0) }, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWaiter()
			a := NewDeviceActor("fake", w, ActorConfig{Spin: -1, BlockTimeout: time.Millisecond})
			defer a.Close(0)
			if tc.name == "waiter" {
				// Held up in another CS's OnDone, the actor cannot hold
				// CS 1 (claimed for its own WAIT_CS) when the waiter polls.
				release := stallActor(t, a, w, 0)
				defer release()
			}
			retired0 := a.Stats().Retired
			type seen struct {
				outstanding int
				retired     uint64
				err         error
			}
			got := make(chan seen, 1)
			tk, err := a.TrackTicket(context.Background(), Submission{Seq: 1, OnDone: func(err error) {
				got <- seen{a.Outstanding(), a.Stats().Retired, err}
			}})
			require.NoError(t, err)
			tc.end(t, a, w, tk)
			s := <-got
			require.ErrorIs(t, s.err, tc.err)
			require.Equal(t, 0, s.outstanding, "Outstanding when OnDone ran")
			require.Equal(t, retired0+1, s.retired, "Stats.Retired when OnDone ran")
		})
	}
}
