package cq

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPassedRearmBackoff: an OnTimeout that returns a deadline not after
// the time it was given (here that time itself, or one already passed)
// is called again minRearm later at the earliest, both on the actor and
// on a Track waiting for room, instead of at once, over and over, with
// OnDeadline each time: a hot loop burning a core. The calls are counted
// (a bounded number) and the times they were given compared.
func TestPassedRearmBackoff(t *testing.T) {
	const calls = 12
	for _, tc := range []struct {
		name   string
		queued bool // the Track waits for room (expireQueued)
		back   time.Duration
	}{
		{"actor/now", false, 0},
		{"actor/past", false, time.Second},
		{"queued/now", true, 0},
		{"queued/past", true, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWaiter()
			var mu sync.Mutex
			var seen []time.Time
			full := make(chan struct{})
			a := NewDeviceActor("fake", w, ActorConfig{MaxOutstanding: 1, OnDeadline: func() {}})
			defer a.Close(0)
			defer w.finish(3, nil) // before Close
			if tc.queued {
				// CSs 1 and 2 fill the actor: CS 3's Track waits for room.
				defer w.finish(1, nil)
				defer w.finish(2, nil)
				for seq := uint64(1); seq <= 2; seq++ {
					require.NoError(t, a.Track(context.Background(), Submission{Seq: seq, OnDone: func(error) {}}))
				}
			}
			tracked := make(chan error, 1)
			go func() {
				tracked <- a.Track(context.Background(), Submission{
					Seq: 3, Deadline: time.Now(),
					OnTimeout: func(now time.Time) time.Time {
						mu.Lock()
						defer mu.Unlock()
						if seen = append(seen, now); len(seen) == calls {
							close(full)
						}
						return now.Add(-tc.back)
					},
					OnDone: func(error) {},
				})
			}()
			recvWithin(t, full, "timed out again and again")
			mu.Lock()
			got := append([]time.Time(nil), seen[:calls]...)
			mu.Unlock()
			for i := 1; i < len(got); i++ {
				require.GreaterOrEqual(t, got[i].Sub(got[i-1]), minRearm, "call %d of OnTimeout came %v after the one before", i, got[i].Sub(got[i-1]))
			}
			if tc.queued {
				select {
				case err := <-tracked:
					t.Fatalf("Track returned (%v) with no room made", err)
				default:
				}
				w.finish(1, nil)
				w.finish(2, nil)
			}
			require.NoError(t, <-tracked)
		})
	}
}
