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
