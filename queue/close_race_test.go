package queue

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentCloseBarrier: when Close returns, no push succeeds, also
// when another Close runs at the same time. Two goroutines close the same
// queue at once, round after round, and try a push right after their
// Close returned. The Close that lost the race to close the channel used
// to pass the push barrier at once and return while the channel was still
// open (seen within a few hundred rounds).
func TestConcurrentCloseBarrier(t *testing.T) {
	var (
		cur   atomic.Pointer[Queue[int]]
		round atomic.Int64
		ack   [2]atomic.Int64
		bad   atomic.Int64
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	const rounds = 20000
	deadline := time.Now().Add(2 * time.Second)
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for r := int64(1); r <= rounds; r++ {
				if g == 0 {
					// The leader starts round r once the other
					// goroutine is done with r-1.
					for ack[1].Load() < r-1 {
					}
					if bad.Load() > 0 || time.Now().After(deadline) {
						stop.Store(true)
					}
					cur.Store(New[int](1, Wait))
					round.Store(r)
				} else {
					for round.Load() < r {
					}
				}
				if stop.Load() {
					return
				}
				q := cur.Load()
				q.Close()
				if q.TryPush(1) {
					bad.Add(1)
				}
				ack[g].Store(r)
			}
		}(g)
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("a push succeeded after Close returned (round %d)", round.Load())
	}
}
