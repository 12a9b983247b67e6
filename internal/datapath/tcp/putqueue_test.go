package tcp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPutQueueBounded: a queue that never empties (a Put pushed for each
// one popped, as while the pipeline stays full) keeps its order and does
// not grow its array with the number of Puts that went through it.
func TestPutQueueBounded(t *testing.T) {
	var pq putQueue
	ops := make([]*op, 10000)
	for i := range ops {
		ops[i] = &op{}
	}
	require.True(t, pq.push(ops[0]))
	require.False(t, pq.push(ops[1]))
	for i := 2; i < len(ops); i++ {
		require.False(t, pq.push(ops[i]), "a drain runs")
		require.Same(t, ops[i-2], pq.pop(), "in order")
		require.Equal(t, 2, pq.waiting())
	}
	require.Less(t, cap(pq.q), 128, "array grown with the Puts that went through")
	require.Same(t, ops[len(ops)-2], pq.pop())
	require.Same(t, ops[len(ops)-1], pq.pop())
	require.Nil(t, pq.pop(), "empty: the drain ends")
	require.True(t, pq.push(ops[0]), "the next push starts a drain")
}
