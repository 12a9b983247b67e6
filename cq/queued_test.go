package cq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestQueuedTrackMeetsDeadline: a submission whose Track waits for room
// (MaxOutstanding CSs tracked) has its deadline kept while it waits: the
// CS is polled once and retired when it ended, else its OnTimeout runs
// (its operations fail with their deadline error) and the Track goes on
// waiting for room. It used to wait for room first, however long past
// the deadline, with nothing timed out.
func TestQueuedTrackMeetsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ended bool // CS 3 ended before its deadline
	}{
		{"running", false},
		{"ended", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWaiter()
			missed := make(chan struct{}, 4)
			a := NewDeviceActor("fake", w, ActorConfig{MaxOutstanding: 1, OnDeadline: func() {
				select {
				case missed <- struct{}{}:
				default:
				}
			}})
			defer a.Close(0)
			defer w.finish(1, nil) // before Close
			defer w.finish(2, nil)
			// CSs 1 and 2 fill the actor (twice MaxOutstanding) and
			// never end until the test's end.
			for seq := uint64(1); seq <= 2; seq++ {
				require.NoError(t, a.Track(context.Background(), Submission{Seq: seq, OnDone: func(error) {}}))
			}
			if tc.ended {
				w.finish(3, nil)
			}
			timedOut, done := make(chan struct{}), make(chan error, 1)
			type result struct {
				tk  *Ticket
				err error
			}
			tracked := make(chan result, 1)
			go func() {
				tk, err := a.TrackTicket(context.Background(), Submission{
					Seq: 3, Deadline: time.Now().Add(5 * time.Millisecond),
					OnTimeout: func(time.Time) time.Time { close(timedOut); return time.Time{} },
					OnDone:    func(err error) { done <- err },
				})
				tracked <- result{tk, err}
			}()
			if tc.ended {
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-time.After(10 * time.Second):
					t.Fatal("CS 3, ended, not retired at its deadline while its Track waited for room")
				}
				r := <-tracked
				require.NoError(t, r.err)
				require.True(t, r.tk.Retired())
				require.Equal(t, 2, a.Outstanding())
				return
			}
			recvWithin(t, timedOut, "timed out at its deadline while its Track waited for room")
			recvWithin(t, missed, "reported to OnDeadline")
			select {
			case r := <-tracked:
				t.Fatalf("Track returned (%v) with no room made", r.err)
			default:
			}
			w.finish(1, nil) // room: CS 3 is tracked, and retires later
			w.finish(2, nil)
			r := <-tracked
			require.NoError(t, r.err)
			w.finish(3, nil)
			require.NoError(t, <-done)
		})
	}
}

// TestBufferedTicketMeetsDeadline: a submission whose Track returned at
// once, but which sits behind MaxOutstanding tracked ones (in the actor's
// channel), times out at its deadline. The actor used to take it only
// when one of those retired, so its deadline passed unseen.
func TestBufferedTicketMeetsDeadline(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{MaxOutstanding: 1})
	defer a.Close(0)
	defer w.finish(1, nil) // before Close
	require.NoError(t, a.Track(context.Background(), Submission{Seq: 1, OnDone: func(error) {}}))
	timedOut, done := make(chan struct{}), make(chan error, 1)
	require.NoError(t, a.Track(context.Background(), Submission{
		Seq: 2, Deadline: time.Now().Add(5 * time.Millisecond),
		OnTimeout: func(time.Time) time.Time { close(timedOut); return time.Time{} },
		OnDone:    func(err error) { done <- err },
	}))
	recvWithin(t, timedOut, "timed out at its deadline behind MaxOutstanding submissions")
	w.finish(2, nil)
	w.finish(1, nil)
	require.NoError(t, <-done)
}

// TestTicketBehindFullChannelSeen: a TrackTicket that finds the actor's
// channel full wakes the actor, which then takes that submission too,
// even when it lands in the channel only after the actor's drain (the
// drain takes at most what the channel holds): a CS nobody watches
// retires. The Kick came before the send only, so the actor, all the
// CSs it took watched, slept (here for BlockTimeout, an hour) with the
// submission unseen in its channel.
func TestTicketBehindFullChannelSeen(t *testing.T) {
	w := newFakeWaiter()
	a := NewDeviceActor("fake", w, ActorConfig{Spin: time.Minute, BlockTimeout: time.Hour, MaxOutstanding: 2})
	defer a.Close(0)
	var watched []*Ticket
	defer func() {
		for _, tk := range watched {
			tk.Unwatch()
		}
	}()
	track := func(seq uint64) *Ticket {
		tk, err := a.TrackTicket(context.Background(), Submission{Seq: seq, OnDone: func(error) {}})
		require.NoError(t, err)
		return tk
	}
	tk := track(1)
	sleeps := a.Stats().Sleeps // before Watch: the actor may sleep at once
	tk.Watch()
	watched = append(watched, tk)
	require.Eventually(t, func() bool { return a.Stats().Sleeps != sleeps }, 10*time.Second, 50*time.Microsecond, "asleep: CS 1 watched")
	// CSs 2 and 3 fill the channel (the sleeping actor does not look),
	// and are watched; CS 4 finds it full.
	for seq := uint64(2); seq <= 3; seq++ {
		tk := track(seq)
		tk.Watch()
		watched = append(watched, tk)
	}
	require.Equal(t, cap(a.in), len(a.in))
	w.finish(4, nil)
	tk4 := track(4)
	require.Eventually(t, tk4.Retired, 10*time.Second, time.Millisecond, "CS 4, ended, retired by the actor")
	for seq := uint64(1); seq <= 3; seq++ {
		w.finish(seq, nil)
	}
	for _, tk := range watched {
		require.True(t, tk.Poll())
	}
}
