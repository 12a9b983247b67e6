package rdmapath

import (
	"context"
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
			got := make(chan error, waiters)
			var wg sync.WaitGroup
			for range waiters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got <- c.take(context.Background(), done)
				}()
			}
			require.Eventually(t, func() bool { return c.waiters.Load() == int32(waiters) }, 5*time.Second, time.Millisecond)
			c.put(waiters) // all at once: one wake-up in the channel
			for range waiters {
				select {
				case err := <-got:
					require.NoError(t, err)
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
		got := make(chan error, 1)
		go func() { got <- c.take(context.Background(), done) }()
		require.Eventually(t, func() bool { return c.waiters.Load() == 1 }, 5*time.Second, time.Millisecond)
		close(done)
		require.ErrorIs(t, <-got, errCreditsDone)
		require.Equal(t, int64(1), c.used.Load(), "a failed wait takes nothing")
	})
	// A cancelled or expired ctx ends a wait while the credits are all
	// taken (before the fix take waited on the endpoint only: an RDMA
	// Put's ctx did not bound it), takes nothing, and does not swallow a
	// wake-up another waiter needs.
	t.Run("ctx", func(t *testing.T) {
		c := newSendCredits(1)
		require.True(t, c.tryTake())
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan error, 1)
		go func() { got <- c.take(ctx, nil) }()
		require.Eventually(t, func() bool { return c.waiters.Load() == 1 }, 5*time.Second, time.Millisecond)
		cancel()
		select {
		case err := <-got:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			c.put(1)
			<-got
			t.Fatal("a cancelled ctx did not end the wait for a credit")
		}
		require.Equal(t, int64(1), c.used.Load(), "a cancelled wait takes nothing")

		tctx, tcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer tcancel()
		require.ErrorIs(t, c.take(tctx, nil), context.DeadlineExceeded)
		require.Equal(t, int64(1), c.used.Load())

		// Two waiters, one cancelled as the credit comes back: the other
		// gets it.
		for range 50 {
			ctx, cancel := context.WithCancel(context.Background())
			other := make(chan error, 1)
			go func() { got <- c.take(ctx, nil) }()
			go func() { other <- c.take(context.Background(), nil) }()
			require.Eventually(t, func() bool { return c.waiters.Load() == 2 }, 5*time.Second, time.Millisecond)
			cancel()
			c.put(1)
			first := <-got
			select {
			case err := <-other:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("a free credit was not handed to the waiter left")
			}
			if first == nil { // the cancelled one won the credit first
				c.put(1)
			} else {
				require.ErrorIs(t, first, context.Canceled)
			}
			require.Equal(t, int64(1), c.used.Load())
		}
		c.put(1)
	})
}
