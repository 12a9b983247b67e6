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

// TestHostCopyStopsPartWay: a large host-to-host copy whose ctx ends, or
// whose deadline passes, once it has been checked stops between two
// pieces and resolves with ErrCanceled or ErrTimeout (it ran to its end
// and resolved with nil, past its deadline), releasing its references;
// whether the copy is split over cores or not, and for overlapping ranges
// (a memmove). On both paths: run by a host worker (Copy, stopped once
// the worker has started it) and run in SubmitBatch's caller (a batch's
// host copy, stopped after SubmitBatch's checks). A copy of 1 MiB or less
// is not copied in pieces and runs to its end, and a copy whose ctx never
// ends is exact.
func TestHostCopyStopsPartWay(t *testing.T) {
	const big = 32 << 20 // 64 pieces of 512 KiB or more
	for _, tc := range []struct {
		path    string // "worker" (Copy) or "batch" (SubmitBatch's caller)
		name    string
		n       int
		workers int
		stop    string // "cancel", "deadline" or "" (none)
		overlap int    // 1: dst 4 KiB above src, -1: below
		want    error
	}{
		{"worker", "split cancel", big, 2, "cancel", 0, gxerr.Canceled},
		{"worker", "split deadline", big, 2, "deadline", 0, gxerr.Timeout},
		{"worker", "one core cancel", big, 1, "cancel", 0, gxerr.Canceled},
		{"worker", "one core deadline", big, 1, "deadline", 0, gxerr.Timeout},
		{"worker", "overlap cancel", big, 2, "cancel", 1, gxerr.Canceled},
		{"worker", "overlap down cancel", big, 2, "cancel", -1, gxerr.Canceled},
		{"worker", "split no stop", big, 2, "", 0, nil},
		{"worker", "overlap no stop", big, 2, "", 1, nil},
		{"worker", "overlap down no stop", big, 2, "", -1, nil},
		{"batch", "split cancel", big, 2, "cancel", 0, gxerr.Canceled},
		{"batch", "split deadline", big, 2, "deadline", 0, gxerr.Timeout},
		{"batch", "one core cancel", big, 1, "cancel", 0, gxerr.Canceled},
		{"batch", "one core deadline", big, 1, "deadline", 0, gxerr.Timeout},
		{"batch", "overlap cancel", big, 2, "cancel", 1, gxerr.Canceled},
		{"batch", "overlap down deadline", big, 2, "deadline", -1, gxerr.Timeout},
		{"batch", "split no stop", big, 2, "", 0, nil},
		{"batch", "overlap down no stop", big, 2, "", -1, nil},
		{"batch", "small cancel", 1 << 20, 2, "cancel", 0, nil},
		{"batch", "small overlap deadline", 1 << 20, 2, "deadline", 1, nil},
	} {
		t.Run(tc.path+" "+tc.name, func(t *testing.T) {
			r := newRig(t, 0)
			r.c.cfg.HostCopy = memcopy.New(memcopy.Config{Workers: tc.workers, ParallelMin: 4 << 20})
			n := tc.n
			buf := r.host(t, 2*n)
			b := buf.Owner.([]byte)
			_, _ = rand.NewChaCha8([32]byte{1}).Read(b)
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
			// The hook runs after the path's checks, before the copy: in
			// the worker (HookProcess) or in the batch's caller (the gate).
			setHook := func(h *func()) { r.c.HookProcess.Store(h) }
			if tc.path == "batch" {
				setHook = r.gate.SetHook
				defer r.gate.SetHook(nil)
			}
			var deadline time.Time
			switch tc.stop {
			case "cancel":
				hook := func() { cancel() }
				setHook(&hook)
			case "deadline":
				deadline = time.Now().Add(200 * time.Millisecond)
				hook := func() { // wait (bounded by the deadline) until it has passed
					for time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
				}
				setHook(&hook)
			}
			buf.Refs.Add(2)
			f := NewFuture(1)
			if tc.path == "batch" {
				require.NoError(t, r.c.SubmitBatch(ctx, f, []Op{{Dst: dst, Src: src}}, deadline))
			} else {
				require.NoError(t, r.c.Copy(ctx, f, dst, src, deadline))
			}
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
			require.ErrorIs(t, err, tc.want, "a copy whose ctx ended or deadline passed while it ran resolved without error")
			require.False(t, bytes.Equal(b[dst.Off:dst.Off+uint64(n)], orig[src.Off:src.Off+uint64(n)]), "the whole copy ran")
			require.Equal(t, uint64(1), r.st.Failed.Load())
		})
	}
}
