package cq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUnbalancedUnwatch: an Unwatch with no Watch before it leaves the
// ticket unwatched (no negative count): the actor still blocks on its CS
// instead of sleeping as if a waiter polled it, and a later Watch does
// hand the ticket to that waiter.
func TestUnbalancedUnwatch(t *testing.T) {
	for _, tc := range []struct {
		name           string
		watch, unwatch int // before the actor looks
		wantWatchers   int32
		wantBlockOrNap string
	}{
		{"unwatch only", 0, 1, 0, "block"},
		{"unwatch twice", 0, 2, 0, "block"},
		{"watch once unwatch twice", 1, 2, 0, "block"},
		{"balanced", 1, 1, 0, "block"},
		{"watched", 1, 0, 1, "nap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWaiter()
			// No spin, and waits longer than the test: the actor either
			// blocks in WAIT_CS on the CS or sleeps (watched), and stays.
			a := NewDeviceActor("fake", w, ActorConfig{Spin: -1, BlockTimeout: time.Hour})
			defer a.Close(0)
			release := stallActor(t, a, w, 1) // the actor looks at CS 2 only once all is set
			defer release()
			tk, err := a.TrackTicket(context.Background(), Submission{Seq: 2, OnDone: func(error) {}})
			require.NoError(t, err)
			for range tc.watch {
				tk.Watch()
			}
			for range tc.unwatch {
				tk.Unwatch()
			}
			release()
			var st ActorStats
			for range 10000 {
				if st = a.Stats(); st.Blocks+st.Sleeps > 0 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if tc.wantBlockOrNap == "block" {
				require.Equal(t, uint64(1), st.Blocks, "blocks on the CS nobody watches")
				require.Zero(t, st.Sleeps, "sleeps as if a waiter polled the CS")
				require.Equal(t, tc.wantWatchers, tk.watchers.Load())
			} else {
				require.NotZero(t, st.Sleeps)
				require.Zero(t, st.Blocks)
				require.Equal(t, tc.wantWatchers, tk.watchers.Load())
				tk.Unwatch() // the last watcher leaves: the actor blocks on it
				for range 10000 {
					if a.Stats().Blocks > 0 {
						break
					}
					time.Sleep(time.Millisecond)
				}
				require.Equal(t, uint64(1), a.Stats().Blocks)
			}
			w.finish(2, nil) // ends the blocking WAIT_CS
			for range 10000 {
				if tk.Retired() {
					break
				}
				time.Sleep(time.Millisecond)
			}
			require.True(t, tk.Retired())
		})
	}
}
