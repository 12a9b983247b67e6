package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOpConfigAllocs: resolving the options of a copy allocates nothing
// when there are none (every Copy and Batch.Submit does it); with options
// they still apply.
func TestOpConfigAllocs(t *testing.T) {
	e := &Engine{}
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = e.opConfig(nil) }))
	d := time.Unix(1, 0)
	require.Equal(t, d, e.opConfig([]OpOption{Deadline(d)}).deadline)
}

// TestExpiredDeadlineHostCopies: a copy whose deadline has already passed
// ends with ErrTimeout, and copies nothing, whichever path runs it. A
// small host-to-host Copy (run in the caller) and a Batch's host copies
// ran all the same and succeeded, while the same copy run by a host
// worker, or a device copy, timed out.
func TestExpiredDeadlineHostCopies(t *testing.T) {
	ctx := context.Background()
	past := Deadline(time.Now().Add(-time.Second))
	for _, tc := range []struct {
		name   string
		n      int
		device bool
		batch  bool
	}{
		{"inline host", 4096, false, false},
		{"host worker", 1 << 20, false, false},
		{"device", 4096, true, false},
		{"batch host", 4096, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			src, err := e.Alloc(tc.n, Host)
			require.NoError(t, err)
			fill(src.Bytes(), 5)
			var dst *Buffer
			if tc.device {
				dst, err = e.Alloc(tc.n, Gaudi(0))
			} else {
				dst, err = e.Alloc(tc.n, Host)
			}
			require.NoError(t, err)
			var f *Future
			if tc.batch {
				b := e.NewBatch()
				b.Copy(dst.All(), src.All())
				f = b.Submit(ctx, past)
			} else {
				f = e.Copy(ctx, dst.All(), src.All(), past)
			}
			require.ErrorIs(t, f.Wait(ctx), ErrTimeout)
			if !tc.device {
				require.Equal(t, make([]byte, tc.n), dst.Bytes(), "the expired copy ran")
			}
			st := e.Stats()
			require.Equal(t, uint64(1), st.Submitted)
			require.Equal(t, uint64(1), st.Failed)
		})
	}
}
