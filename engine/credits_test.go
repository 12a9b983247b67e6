package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSendCredits: at most max taken; a waiter gets the next credit put
// back; several waiters all get through when as many credits come back
// at once (one wake-up is passed on); a closed done ends a wait; a
// credit returned twice panics.
func TestSendCredits(t *testing.T) {
	t.Run("limit", func(t *testing.T) {
		c := newSendCredits(3)
		for range 3 {
			require.True(t, c.tryTake())
		}
		require.False(t, c.tryTake())
		c.put(1)
		require.True(t, c.tryTake())
		c.put(3)
		require.Zero(t, c.used.Load())
		require.Panics(t, func() { c.put(1) })
	})
	t.Run("waiters", func(t *testing.T) {
		for _, waiters := range []int{1, 2, 5} {
			c := newSendCredits(waiters)
			for range waiters {
				require.True(t, c.tryTake())
			}
			done := make(chan struct{})
			got := make(chan bool, waiters)
			var wg sync.WaitGroup
			for range waiters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got <- c.take(done)
				}()
			}
			require.Eventually(t, func() bool { return c.waiters.Load() == int32(waiters) }, 5*time.Second, time.Millisecond)
			c.put(waiters) // all at once: one wake-up in the channel
			for range waiters {
				select {
				case ok := <-got:
					require.True(t, ok)
				case <-time.After(10 * time.Second):
					close(done)
					wg.Wait()
					t.Fatalf("%d waiters: a waiter did not get a free credit", waiters)
				}
			}
			wg.Wait()
			require.Equal(t, int64(waiters), c.used.Load())
		}
	})
	t.Run("done", func(t *testing.T) {
		c := newSendCredits(1)
		require.True(t, c.tryTake())
		done := make(chan struct{})
		got := make(chan bool, 1)
		go func() { got <- c.take(done) }()
		require.Eventually(t, func() bool { return c.waiters.Load() == 1 }, 5*time.Second, time.Millisecond)
		close(done)
		require.False(t, <-got)
		require.Equal(t, int64(1), c.used.Load(), "a failed wait takes nothing")
	})
}
