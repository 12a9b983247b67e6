package copier

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/memcopy"
)

// TestBatchHostCopyStopsPartWay: a batch's large host-to-host copy, run in
// SubmitBatch's caller, whose ctx ends or whose deadline passes once it
// has been checked stops between two pieces and resolves with ErrCanceled
// or ErrTimeout, as a host worker's copy does (it ran to its end and
// resolved with nil, past its deadline), releasing its references;
// whether split over cores or not, and for overlapping ranges. A copy of
// 1 MiB or less is not copied in pieces and runs to its end, and a copy
// whose ctx never ends is exact.
func TestBatchHostCopyStopsPartWay(t *testing.T) {
	const big = 32 << 20 // 64 pieces of 512 KiB or more
	for _, tc := range []struct {
		name    string
		n       int
		workers int
		stop    string // "cancel", "deadline" or "" (none)
		overlap int    // 1: dst 4 KiB above src, -1: below
		want    error
	}{
		{"split cancel", big, 2, "cancel", 0, gxerr.Canceled},
		{"split deadline", big, 2, "deadline", 0, gxerr.Timeout},
		{"one core cancel", big, 1, "cancel", 0, gxerr.Canceled},
		{"one core deadline", big, 1, "deadline", 0, gxerr.Timeout},
		{"overlap cancel", big, 2, "cancel", 1, gxerr.Canceled},
		{"overlap down deadline", big, 2, "deadline", -1, gxerr.Timeout},
		{"split no stop", big, 2, "", 0, nil},
		{"overlap down no stop", big, 2, "", -1, nil},
		{"small cancel", 1 << 20, 2, "cancel", 0, nil},
		{"small overlap deadline", 1 << 20, 2, "deadline", 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 0)
			r.c.cfg.HostCopy = memcopy.New(memcopy.Config{Workers: tc.workers, ParallelMin: 4 << 20})
			n := tc.n
			buf := r.host(t, 2*n)
			b := buf.Owner.([]byte)
			_, _ = rand.NewChaCha8([32]byte{2}).Read(b)
			orig := bytes.Clone(b)
			src, dst := Slice{M: buf, Off: 0, N: uint64(n)}, Slice{M: buf, Off: uint64(n), N: uint64(n)}
			switch tc.overlap {
			case 1:
				dst.Off = 4096
			case -1:
				src.Off, dst.Off = 4096, 0
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var deadline time.Time
			switch tc.stop {
			case "cancel":
				hook := func() { cancel() } // after SubmitBatch's checks, before the copy
				r.gate.SetHook(&hook)
			case "deadline":
				deadline = time.Now().Add(200 * time.Millisecond)
				hook := func() { // wait (bounded by the deadline) until it has passed
					for time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
				}
				r.gate.SetHook(&hook)
			}
			defer r.gate.SetHook(nil)
			buf.Refs.Add(2)
			f := NewFuture(1)
			require.NoError(t, r.c.SubmitBatch(ctx, f, []Op{{Dst: dst, Src: src}}, deadline))
			err := f.Wait(context.Background())
			require.Zero(t, buf.Refs.Load(), "references not released")
			if tc.want == nil {
				require.NoError(t, err)
				want := bytes.Clone(orig)
				copy(want[dst.Off:dst.Off+uint64(n)], orig[src.Off:src.Off+uint64(n)])
				require.True(t, bytes.Equal(want, b), "copy not exact")
				require.Zero(t, r.st.Failed.Load())
				return
			}
			require.ErrorIs(t, err, tc.want, "a batch's host copy whose ctx ended or deadline passed while it ran resolved without error")
			require.False(t, bytes.Equal(b[dst.Off:dst.Off+uint64(n)], orig[src.Off:src.Off+uint64(n)]), "the whole copy ran")
			require.Equal(t, uint64(1), r.st.Failed.Load())
		})
	}
}
