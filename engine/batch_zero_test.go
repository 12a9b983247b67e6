package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBatchZeroValue: a Batch not made by Engine.NewBatch (a declared
// Batch{}, or a nil *Batch) is refused with ErrInvalid by Submit, empty
// or not, and Len, Reset and Copy answer without a panic. Submit
// dereferenced the batch's nil engine (and a nil *Batch panicked in
// every method); the copies added to a zero Batch are dropped, as
// Submit's implied Reset drops a submitted batch's.
func TestBatchZeroValue(t *testing.T) {
	e := newEngine(t, Config{})
	h, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		b    func() *Batch
		ops  int
	}{
		{"zero empty", func() *Batch { return &Batch{} }, 0},
		{"zero with copies", func() *Batch { return &Batch{} }, 2},
		{"nil", func() *Batch { return nil }, 0},
		{"nil with copies", func() *Batch { return nil }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b()
			var f *Future
			require.NotPanics(t, func() {
				for i := range tc.ops {
					b.Copy(h.Slice(0, 10), h.Slice(100+10*i, 10))
				}
				f = b.Submit(ctx)
			})
			require.ErrorIs(t, f.Wait(ctx), ErrInvalid)
			require.NotPanics(t, func() {
				require.Zero(t, b.Len(), "Submit empties the batch")
				b.Reset()
			})
		})
	}
	// The buffer is untouched by the refused batches: Free finds no
	// reference left and releases it at once.
	require.NoError(t, h.Free())
	e.mu.Lock()
	_, alive := e.buffers[h.id]
	e.mu.Unlock()
	require.False(t, alive)
}
