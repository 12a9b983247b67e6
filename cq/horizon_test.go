package cq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetireHorizon: a submission that ended while its waiter watched it
// without polling (the actor leaves it alone) is polled, and retired, by
// the Track of the submission RetireHorizon (rounded up to a power of
// two) after it; without a horizon it stays unretired.
func TestRetireHorizon(t *testing.T) {
	tests := []struct {
		name    string
		horizon int
		last    uint64 // the last sequence number tracked
		retired bool
	}{
		{"off", 0, 5, false},
		{"4: the Track of 5 polls 1", 4, 5, true},
		{"3 rounds up to 4", 3, 5, true},
		{"4: not yet at 4", 4, 4, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWaiter()
			a := NewDeviceActor("horizon", w, ActorConfig{RetireHorizon: tc.horizon})
			ctx := context.Background()
			// The actor, held up in another CS's OnDone, cannot retire
			// CS 1 itself: only a Track's horizon poll can. (Watch alone
			// left a window: the actor could take CS 1 before it was
			// watched and retire it once it ended.)
			release := stallActor(t, a, w, 0)
			defer release()
			done := make(chan error, 1)
			first, err := a.TrackTicket(ctx, Submission{Seq: 1, OnDone: func(err error) { done <- err }})
			require.NoError(t, err)
			first.Watch() // its waiter "polls" it: the actor leaves it alone
			w.finish(1, nil)
			for seq := uint64(2); seq <= tc.last; seq++ {
				_, err := a.TrackTicket(ctx, Submission{Seq: seq, OnDone: func(error) {}})
				require.NoError(t, err)
			}
			require.Equal(t, tc.retired, first.Retired())
			if tc.retired {
				require.NoError(t, <-done)
				require.Equal(t, uint64(1), a.Stats().HorizonPolls)
			}
			first.Unwatch()
			release()
			for seq := uint64(2); seq <= tc.last; seq++ {
				w.finish(seq, nil)
			}
			require.Eventually(t, func() bool { return a.Outstanding() == 0 }, time.Minute, time.Millisecond)
			a.Close(0)
		})
	}
}
