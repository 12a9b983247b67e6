package cq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHorizonKeepsNoRetired: a ticket already retired when its Track
// records it in the retire horizon (found ended by the Track itself at
// its deadline while it waited for room, or retired by the actor or a
// waiter before the Track got there) is not kept there: its retirement
// had nothing to forget yet, so the slot pinned the ticket (its
// Submission and callbacks) until a later Track replaced it, also after
// the actor exited.
func TestHorizonKeepsNoRetired(t *testing.T) {
	t.Run("pass", func(t *testing.T) {
		h := newHorizon(4)
		tk := &Ticket{Submission: Submission{Seq: 3}}
		tk.state.Store(ticketRetired)
		h.pass(tk)
		require.Nil(t, h.slot(3).Load())
	})
	t.Run("queued", func(t *testing.T) {
		w := newFakeWaiter()
		a := NewDeviceActor("fake", w, ActorConfig{MaxOutstanding: 1, RetireHorizon: 4})
		defer a.Close(0)
		defer w.finish(1, nil) // before Close
		defer w.finish(2, nil)
		// CSs 1 and 2 fill the actor: CS 3's Track waits for room, and
		// finds it ended at its deadline.
		for seq := uint64(1); seq <= 2; seq++ {
			require.NoError(t, a.Track(context.Background(), Submission{Seq: seq, OnDone: func(error) {}}))
		}
		w.finish(3, nil)
		tk, err := a.TrackTicket(context.Background(), Submission{
			Seq: 3, Deadline: time.Now().Add(time.Millisecond), OnDone: func(error) {},
		})
		require.NoError(t, err)
		require.True(t, tk.Retired())
		require.Nil(t, a.horizon.slot(3).Load(), "retired ticket kept in the horizon")
	})
}
