package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// refsOf is the number of operations b counts in flight.
func refsOf(b *Buffer) uint64 { return b.state.Load() &^ freedBit }

// TestBatchReferences: while a batch runs it holds one reference per copy
// on each buffer the copy uses, whatever the order of its copies (Submit
// counts a run of consecutive copies on one buffer with one update, and
// so does the CS's retirement when it drops them), and it holds none once
// Wait returns. Its host-to-host copies run in Submit and hold none after
// it.
func TestBatchReferences(t *testing.T) {
	for _, model := range []string{"gaudi2", "gaudi3"} {
		t.Run(model, func(t *testing.T) {
			e := newEngine(t, Config{Emulator: EmulatorConfig{Model: model}})
			const size = 64 << 10
			h1 := mustAlloc(t, e, size, Host)
			h2 := mustAlloc(t, e, size, Host)
			d1 := mustAlloc(t, e, size, Gaudi(0))
			d2 := mustAlloc(t, e, size, Gaudi(0))
			bufs := map[string]*Buffer{"h1": h1, "h2": h2, "d1": d1, "d2": d2}
			ctx := context.Background()
			for _, tc := range []struct {
				name string
				ops  [][2]string // dst, src: host to Gaudi, or host to host
			}{
				{"one pair", [][2]string{{"d1", "h1"}, {"d1", "h1"}, {"d1", "h1"}, {"d1", "h1"}}},
				{"alternating", [][2]string{{"d1", "h1"}, {"d2", "h2"}, {"d1", "h1"}, {"d2", "h2"}, {"d1", "h2"}}},
				{"runs", [][2]string{{"d1", "h1"}, {"d1", "h1"}, {"d2", "h1"}, {"d2", "h2"}, {"d2", "h2"}, {"d1", "h2"}}},
				{"host copies between", [][2]string{{"d1", "h1"}, {"h2", "h1"}, {"d1", "h1"}, {"h1", "h2"}, {"d2", "h2"}}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					want := map[string]uint64{}
					bt := e.NewBatch()
					for i, op := range tc.ops {
						dst, src := bufs[op[0]], bufs[op[1]]
						bt.Copy(dst.Slice(i*4096, 4096), src.Slice(32<<10+i*4096, 4096))
						if dst.Location().IsGaudi() || src.Location().IsGaudi() {
							want[op[0]]++
							want[op[1]]++
						}
					}
					// Its one CS (every device copy goes host to
					// Gaudi) ends 300 ms after it ran.
					e.cp.Devs[0].Sim.DelayNextCS(1, 300*time.Millisecond)
					f := bt.Submit(ctx)
					for name, b := range bufs {
						require.Equal(t, want[name], refsOf(b), "%s while the batch runs", name)
					}
					require.NoError(t, f.Wait(ctx))
					for name, b := range bufs {
						require.Zero(t, refsOf(b), "%s once Wait returned", name)
					}
				})
			}
			// Gaudi to host and back in one batch: two directions, two
			// CSs, each dropping its own references.
			bt := e.NewBatch()
			bt.Copy(h2.Slice(0, 4096), d1.Slice(0, 4096))
			bt.Copy(d2.Slice(0, 4096), h1.Slice(0, 4096))
			bt.Copy(h2.Slice(4096, 4096), d1.Slice(4096, 4096))
			require.NoError(t, bt.Submit(ctx).Wait(ctx))
			for name, b := range bufs {
				require.Zero(t, refsOf(b), "%s after a batch both ways", name)
			}
		})
	}
}

// TestBatchFreedBufferHoldsNothing: a batch with a copy on a freed buffer
// is refused with ErrFreed at the first copy using it, and holds no
// reference on any of its buffers, those of the runs before and after
// that copy included; their Free then releases them at once.
func TestBatchFreedBufferHoldsNothing(t *testing.T) {
	e := newEngine(t, Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		ops   [][2]string // dst, src
		freed string
		at    int
	}{
		{"source in a middle run", [][2]string{{"d1", "h1"}, {"d1", "h1"}, {"d1", "x"}, {"d1", "x"}, {"d2", "h1"}}, "x", 2},
		{"first destination", [][2]string{{"x", "h1"}, {"d1", "h1"}}, "x", 0},
		{"last source", [][2]string{{"d1", "h1"}, {"d2", "h1"}, {"d2", "x"}}, "x", 2},
		{"destination after use as source", [][2]string{{"d1", "h1"}, {"d2", "h1"}, {"h1", "d1"}, {"x", "d2"}}, "x", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bufs := map[string]*Buffer{
				"h1": mustAlloc(t, e, 64<<10, Host), "d1": mustAlloc(t, e, 64<<10, Gaudi(0)),
				"d2": mustAlloc(t, e, 64<<10, Gaudi(0)), "x": mustAlloc(t, e, 64<<10, Host),
			}
			require.NoError(t, bufs[tc.freed].Free())
			bt := e.NewBatch()
			for i, op := range tc.ops {
				bt.Copy(bufs[op[0]].Slice(i*4096, 4096), bufs[op[1]].Slice(32<<10+i*4096, 4096))
			}
			f := bt.Submit(ctx)
			require.ErrorIs(t, f.Wait(ctx), ErrFreed)
			errs := f.Errs()
			require.ErrorIs(t, errs[tc.at], ErrFreed, "the first copy on the freed buffer")
			for i, err := range errs {
				if i != tc.at {
					require.ErrorContains(t, err, fmt.Sprintf("not submitted: copy %d failed", tc.at), "copy %d", i)
				}
			}
			for name, b := range bufs {
				require.Zero(t, refsOf(b), "%s holds a reference of the refused batch", name)
				if name != tc.freed {
					require.NoError(t, b.Free())
				}
				require.True(t, b.released.Load(), "%s is released once freed", name)
			}
		})
	}
}

// mustAlloc allocates size bytes at loc, or fails the test.
func mustAlloc(t *testing.T, e *Engine, size int, loc Location) *Buffer {
	t.Helper()
	b, err := e.Alloc(size, loc)
	require.NoError(t, err)
	return b
}
