package queue

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestPushPop(t *testing.T) {
	tests := []struct {
		name string
		mode Mode
	}{{"wait", Wait}, {"failfast", FailFast}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := New[int](4, tc.mode)
			for i := 0; i < 4; i++ {
				require.NoError(t, q.Push(context.Background(), i))
			}
			buf := make([]int, 3)
			require.Equal(t, 3, q.PopBatch(buf))
			require.Equal(t, []int{0, 1, 2}, buf)
			require.Equal(t, 1, q.PopBatch(buf))
			require.Equal(t, 3, buf[0])
			require.Equal(t, 0, q.PopBatch(buf))
		})
	}
}

func TestFullFailFast(t *testing.T) {
	q := New[int](2, FailFast)
	require.NoError(t, q.Push(context.Background(), 1))
	require.NoError(t, q.Push(context.Background(), 2))
	require.ErrorIs(t, q.Push(context.Background(), 3), ErrFull)
	require.False(t, q.TryPush(3))
	require.Equal(t, uint64(2), q.Stats().FullHits)
}

func TestFullWaitsForDeadline(t *testing.T) {
	q := New[int](1, Wait)
	require.NoError(t, q.Push(context.Background(), 1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, q.Push(ctx, 2), context.DeadlineExceeded)
}

func TestFullWaitsForRoom(t *testing.T) {
	q := New[int](1, Wait)
	require.NoError(t, q.Push(context.Background(), 1))
	done := make(chan error, 1)
	go func() { done <- q.Push(context.Background(), 2) }()
	buf := make([]int, 1)
	// Drain until the blocked push lands.
	got := []int{}
	for len(got) < 2 {
		if q.PopBatch(buf) == 1 {
			got = append(got, buf[0])
		}
	}
	require.NoError(t, <-done)
	require.Equal(t, []int{1, 2}, got)
}

func TestCloseWakesPushers(t *testing.T) {
	q := New[int](1, Wait)
	require.NoError(t, q.Push(context.Background(), 1))
	done := make(chan error, 1)
	go func() { done <- q.Push(context.Background(), 2) }()
	q.Close()
	q.Close()
	require.ErrorIs(t, <-done, ErrClosed)
	require.ErrorIs(t, q.Push(context.Background(), 3), ErrClosed)
	buf := make([]int, 4)
	require.Equal(t, 1, q.PopBatch(buf), "queued items stay drainable")
}

func TestConcurrentProducers(t *testing.T) {
	const producers, each = 16, 1000
	q := New[int](64, Wait)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				assert.NoError(t, q.Push(context.Background(), p*each+i))
			}
		}(p)
	}
	seen := make([]bool, producers*each)
	buf := make([]int, 32)
	for n := 0; n < producers*each; {
		k := q.PopBatch(buf)
		for _, v := range buf[:k] {
			require.False(t, seen[v])
			seen[v] = true
		}
		n += k
	}
	wg.Wait()
	require.Equal(t, uint64(producers*each), q.Stats().Pushed)
}

func BenchmarkPushPop(b *testing.B) {
	q := New[int](1024, Wait)
	buf := make([]int, 64)
	ctx := context.Background()
	for b.Loop() {
		for i := 0; i < 64; i++ {
			_ = q.Push(ctx, i)
		}
		q.PopBatch(buf)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/item")
}

// TestNoPushAfterClose: once Close returns, a final drain sees every item
// any Push reported as accepted.
func TestNoPushAfterClose(t *testing.T) {
	for round := 0; round < 200; round++ {
		q := New[int](8, Wait)
		var accepted atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 4; i++ {
					if q.TryPush(i) {
						accepted.Add(1)
					}
				}
			}()
		}
		q.Close()
		drained := int64(q.PopBatch(make([]int, 64)))
		wg.Wait()
		require.Zero(t, q.Len(), "nothing was pushed after Close returned")
		require.Equal(t, accepted.Load(), drained)
	}
}

func TestClosed(t *testing.T) {
	q := New[int](1, Wait)
	require.False(t, q.Closed())
	q.Close()
	require.True(t, q.Closed())
	q.Close() // idempotent
	require.True(t, q.Closed())
}
