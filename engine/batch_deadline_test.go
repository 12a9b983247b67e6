package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pastDeadlineCtx is a ctx whose deadline has passed while its own timer
// has not fired yet (Err still nil): what a context.WithDeadline is for
// the moment between the two (see ctxEnded).
type pastDeadlineCtx struct{ context.Context }

func (pastDeadlineCtx) Deadline() (time.Time, bool) { return time.Now().Add(-time.Second), true }

// TestBatchHostCopiesAfterDeadline: a batch's small host-to-host copies
// (run in Submit's caller) whose deadline has passed when the engine
// gets to them end with ErrTimeout (ErrCanceled for a cancelled ctx) and
// leave their destinations untouched, as a host worker's or a device
// copy's do, whether the deadline is the Deadline option's or ctx's. The
// device copy that goes first in the batch (turned into a command
// submission on the caller's goroutine) holds the caller until the
// deadline has passed. Before the fix only the option's deadline was
// looked at: after ctx's deadline (or cancellation) the copies ran and
// succeeded.
func TestBatchHostCopiesAfterDeadline(t *testing.T) {
	const hostOps, n = 4, 4096
	for _, tc := range []struct {
		name   string
		device bool   // a device copy first, its submission held until the deadline
		stop   string // "option" (Deadline), "ctx" (ctx's deadline), "cancel", "late" (ctx's deadline, its timer not fired)
		want   []error
	}{
		{"option deadline during submit", true, "option", []error{ErrTimeout}},
		{"ctx deadline during submit", true, "ctx", []error{ErrTimeout, context.DeadlineExceeded}},
		{"ctx canceled during submit", true, "cancel", []error{ErrCanceled, context.Canceled}},
		{"ctx deadline passed, timer not fired", false, "late", []error{ErrTimeout, context.DeadlineExceeded}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			bg := context.Background()
			src, err := e.Alloc(n, Host)
			require.NoError(t, err)
			fill(src.Bytes(), 3)
			dsts := make([]*Buffer, hostOps)
			for i := range dsts {
				dsts[i], err = e.Alloc(n, Host)
				require.NoError(t, err)
			}
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			var opts []OpOption
			const wait = 300 * time.Millisecond // room to reach the device copy's submission first
			deadline := time.Now().Add(wait)
			var hold func()
			switch tc.stop {
			case "option":
				opts = append(opts, Deadline(deadline))
				hold = func() {
					for time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
				}
			case "ctx":
				var cancelD context.CancelFunc
				ctx, cancelD = context.WithDeadline(ctx, deadline)
				defer cancelD()
				hold = func() { <-ctx.Done() }
			case "cancel":
				hold = cancel
			case "late":
				ctx = pastDeadlineCtx{ctx}
			}
			b := e.NewBatch()
			var held atomic.Bool
			if tc.device {
				d, err := e.Alloc(n, Gaudi(0))
				require.NoError(t, err)
				b.Copy(d.All(), src.All())
				hook := func(uint64) {
					if held.CompareAndSwap(false, true) {
						hold()
					}
				}
				e.cp.HookSubmitted.Store(&hook)
				defer e.cp.HookSubmitted.Store(nil)
			}
			first := b.Len()
			for _, d := range dsts {
				b.Copy(d.All(), src.All())
			}
			inline := e.st.InlineSubmits.Load()
			f := b.Submit(ctx, opts...)
			<-f.Done()
			if tc.device {
				require.True(t, held.Load(), "the device copy's CS was not submitted")
				require.Equal(t, inline+1, e.st.InlineSubmits.Load(),
					"the device copy went to a worker: the caller was not held until the deadline")
			}
			errs := f.Errs()
			require.Len(t, errs, first+hostOps)
			for i, d := range dsts {
				for _, want := range tc.want {
					require.ErrorIs(t, errs[first+i], want, "host copy %d", i)
				}
				require.Equal(t, make([]byte, n), d.Bytes(), "host copy %d ran after its deadline", i)
			}
			require.ErrorIs(t, f.Err(), tc.want[0])
		})
	}
}

// TestCopyInlineAfterCtxDeadline: a host-to-host Copy small enough to run
// on the caller's goroutine, whose ctx's deadline has passed while ctx's
// timer has not fired (Err still nil), ends with ErrTimeout and leaves
// its destination untouched, as one with a passed Deadline option does.
// Before the fix only ctx.Err and the option were looked at, in the
// caller and then in the host worker the copy goes to, and it ran.
func TestCopyInlineAfterCtxDeadline(t *testing.T) {
	live, cancel := context.WithCancel(context.Background()) // a Done channel, as a ctx with a deadline has
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		opts []OpOption
		want error // nil: the copy runs
	}{
		{"ctx deadline passed, timer not fired", pastDeadlineCtx{live}, nil, ErrTimeout},
		{"option deadline passed", context.Background(), []OpOption{Deadline(time.Now().Add(-time.Second))}, ErrTimeout},
		{"no deadline", context.Background(), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			const n = 4096
			src, err := e.Alloc(n, Host)
			require.NoError(t, err)
			dst, err := e.Alloc(n, Host)
			require.NoError(t, err)
			fill(src.Bytes(), 5)
			err = e.Copy(tc.ctx, dst.All(), src.All(), tc.opts...).Wait(context.Background())
			if tc.want == nil {
				require.NoError(t, err)
				require.Equal(t, src.Bytes(), dst.Bytes())
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, make([]byte, n), dst.Bytes(), "the copy ran after its deadline")
		})
	}
}
