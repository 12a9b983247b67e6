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

// TestHostCopyStopsPartWay: a large host-to-host copy run by a host worker
// whose ctx ends, or whose deadline passes, once the worker has started it
// stops between two pieces and resolves with ErrCanceled or ErrTimeout
// (it ran to its end and resolved with nil, past its deadline), releasing
// its references; whether the copy is split over cores or not, and for
// overlapping ranges (a memmove). A copy whose ctx never ends is exact.
func TestHostCopyStopsPartWay(t *testing.T) {
	const n = 32 << 20 // 64 pieces of 512 KiB or more
	for _, tc := range []struct {
		name    string
		workers int
		stop    string // "cancel", "deadline" or "" (none)
		overlap int    // 1: dst 4 KiB above src, -1: below
		want    error
	}{
		{"split cancel", 2, "cancel", 0, gxerr.Canceled},
		{"split deadline", 2, "deadline", 0, gxerr.Timeout},
		{"one core cancel", 1, "cancel", 0, gxerr.Canceled},
		{"one core deadline", 1, "deadline", 0, gxerr.Timeout},
		{"overlap cancel", 2, "cancel", 1, gxerr.Canceled},
		{"overlap down cancel", 2, "cancel", -1, gxerr.Canceled},
		{"split no stop", 2, "", 0, nil},
		{"overlap no stop", 2, "", 1, nil},
		{"overlap down no stop", 2, "", -1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 0)
			r.c.cfg.HostCopy = memcopy.New(memcopy.Config{Workers: tc.workers, ParallelMin: 4 << 20})
			buf := r.host(t, 2*n)
			b := buf.Owner.([]byte)
			_, _ = rand.NewChaCha8([32]byte{1}).Read(b)
			orig := bytes.Clone(b)
			src, dst := Slice{M: buf, Off: 0, N: n}, Slice{M: buf, Off: n, N: n}
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
				hook := func() { cancel() } // after the worker's checks, before the copy
				r.c.HookProcess.Store(&hook)
			case "deadline":
				deadline = time.Now().Add(200 * time.Millisecond)
				hook := func() { // wait (bounded by the deadline) until it has passed
					for time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
				}
				r.c.HookProcess.Store(&hook)
			}
			buf.Refs.Add(2)
			f := NewFuture(1)
			require.NoError(t, r.c.Copy(ctx, f, dst, src, deadline))
			err := f.Wait(context.Background())
			require.Zero(t, buf.Refs.Load(), "references not released")
			if tc.want == nil {
				require.NoError(t, err)
				want := bytes.Clone(orig)
				copy(want[dst.Off:dst.Off+n], orig[src.Off:src.Off+n])
				require.True(t, bytes.Equal(want, b), "copy not exact")
				return
			}
			require.ErrorIs(t, err, tc.want, "a copy whose ctx ended or deadline passed while it ran resolved without error")
			require.False(t, bytes.Equal(b[dst.Off:dst.Off+n], orig[src.Off:src.Off+n]), "the whole copy ran")
			require.Equal(t, uint64(1), r.st.Failed.Load())
		})
	}
}
