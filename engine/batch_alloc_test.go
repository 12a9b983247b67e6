package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGaudiBatchAllocations: a batch of 256 host-to-Gaudi copies on the
// emulated device allocates under half an object per copy: the copier
// sizes a CS's lists for its copies at once, and the WAIT_CS polls that
// find its end allocate nothing. It was about one per copy (252), from
// lists grown copy by copy and one allocation per poll.
func TestGaudiBatchAllocations(t *testing.T) {
	e := newEngine(t, Config{})
	const size, batch = 4096, 256
	h, err := e.Alloc(size*batch, Host)
	require.NoError(t, err)
	d, err := e.Alloc(size*batch, Gaudi(0))
	require.NoError(t, err)
	ctx := context.Background()
	bt := e.NewBatch()
	run := func() {
		for i := range batch {
			bt.Copy(d.Slice(i*size, size), h.Slice(i*size, size))
		}
		if err := bt.Submit(ctx).Wait(ctx); err != nil {
			panic(err)
		}
	}
	run()
	allocs := testing.AllocsPerRun(20, run)
	t.Logf("%.0f objects per batch of %d copies", allocs, batch)
	require.Less(t, allocs, float64(batch/2), "objects allocated per batch")
}
