package copier

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestFutureResolves(t *testing.T) {
	e1, e2 := errors.New("one"), errors.New("two")
	tests := []struct {
		name    string
		batch   bool
		errs    []error
		wantErr error
	}{
		{"single ok", false, []error{nil}, nil},
		{"first error wins", false, []error{nil, e1, e2}, e1},
		{"batch per-op status", true, []error{e2, nil, e1}, e2},
		{"batch all ok", true, []error{nil, nil, nil}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFuture(len(tc.errs))
			if tc.batch {
				f = &Future{}
				f.InitBatch(len(tc.errs))
			}
			for i, err := range tc.errs {
				require.False(t, f.IsDone())
				require.ErrorIs(t, f.Err(), gxerr.NotDone)
				f.Complete(i, err)
			}
			require.True(t, f.IsDone())
			<-f.Done()
			require.Equal(t, tc.wantErr, f.Err())
			if tc.batch {
				require.Equal(t, tc.errs, f.Errs())
			} else {
				require.Nil(t, f.Errs())
			}
			f.Complete(0, e1) // after resolution: ignored
			require.Equal(t, tc.wantErr, f.Err())
		})
	}
}

// TestBatchStatusLazy: a batch that succeeds carries no per-op slice (a
// thousand-element list's 16 KB of nils, made and cleared for nothing)
// until Errs asks for it.
func TestBatchStatusLazy(t *testing.T) {
	const n = 1000
	var f *Future
	allocs := testing.AllocsPerRun(20, func() {
		f = &Future{}
		f.InitBatch(n)
		f.CompleteN(n)
	})
	require.LessOrEqual(t, allocs, 1.0, "the future only")
	require.NoError(t, f.Err())
	require.Equal(t, make([]error, n), f.Errs())
}

func TestFutureWaitCtx(t *testing.T) {
	f := NewFuture(1)
	f.SetSpin(time.Microsecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := f.Wait(ctx)
	require.ErrorIs(t, err, gxerr.Canceled)
	require.ErrorIs(t, err, context.Canceled)
	f.CompleteAll(gxerr.Closed)
	require.ErrorIs(t, f.Wait(context.Background()), gxerr.Closed)
	require.NoError(t, Resolved(nil).Wait(ctx), "a resolved future's wait ignores ctx")
}

func TestOverlaps(t *testing.T) {
	var a, b Mem
	tests := []struct {
		name string
		x, y Slice
		want bool
	}{
		{"other buffer", Slice{&a, 0, 10}, Slice{&b, 0, 10}, false},
		{"disjoint", Slice{&a, 0, 10}, Slice{&a, 10, 10}, false},
		{"shared byte", Slice{&a, 0, 11}, Slice{&a, 10, 10}, true},
		{"inside", Slice{&a, 2, 3}, Slice{&a, 0, 10}, true},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, Overlaps(tc.x, tc.y), tc.name)
		require.Equal(t, tc.want, Overlaps(tc.y, tc.x), tc.name)
	}
}

func TestLatencyHist(t *testing.T) {
	var c Counters
	for _, d := range []time.Duration{time.Microsecond, 2 * time.Microsecond, time.Millisecond} {
		c.Lat.add(d)
	}
	p50, n := c.Lat.Quantile(0.5)
	require.Equal(t, uint64(3), n)
	require.GreaterOrEqual(t, p50, 2*time.Microsecond)
	require.Less(t, p50, 3*time.Microsecond, "within a bucket (12.5%)")
	require.Equal(t, time.Millisecond, c.Lat.Max())
	c.Record(time.Microsecond, 8, nil)
	c.Record(time.Microsecond, 8, errors.New("x"))
	c.RecordInline(4)
	require.Equal(t, []uint64{2, 1, 12, 1}, []uint64{c.Completed.Load(), c.Failed.Load(), c.Bytes.Load(), c.Inline.Load()})
}

func TestLatencyHistLog2(t *testing.T) {
	var h LatencyHist
	for _, d := range []time.Duration{1, 1000, 1023, 1024, time.Millisecond} {
		h.Add(d)
	}
	counts, total := h.Log2()
	require.Equal(t, uint64(5), total)
	require.Equal(t, uint64(1), counts[0], "below 2 ns")
	require.Equal(t, uint64(1), counts[8], "below 512 ns")
	require.Equal(t, uint64(3), counts[9], "below 1024 ns")
	require.Equal(t, uint64(4), counts[10], "below 2048 ns")
	require.Equal(t, uint64(5), counts[len(counts)-1])
	require.Equal(t, 1+1000+1023+1024+time.Millisecond, h.Sum())
}

func TestCountersErrorsByKind(t *testing.T) {
	var c Counters
	c.Record(time.Microsecond, 8, gxerr.New(gxerr.Timeout, "x", nil))
	c.Record(time.Microsecond, 8, gxerr.Peer)
	c.Record(time.Microsecond, 8, gxerr.Peer)
	c.Record(time.Microsecond, 8, nil)
	require.Equal(t, uint64(1), c.Errs.Load(gxerr.KindOf(gxerr.Timeout)))
	require.Equal(t, uint64(2), c.Errs.Load(gxerr.KindOf(gxerr.Peer)))
	require.Equal(t, uint64(3), c.Failed.Load())
}
