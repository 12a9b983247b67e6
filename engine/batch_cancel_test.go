package engine

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBatchCancelDropsCopiesNotYetInCS: a batch of device copies larger
// than one command submission whose ctx ends once its first CS is on the
// device drops the copies not yet in a CS (ErrCanceled, destination
// untouched), as Batch.Submit promises; the copies already submitted run
// to their end. Before the fix ctx was looked at only when a worker took
// the batch from its queue, so every later CS of the batch was still
// built and submitted after the cancel.
func TestBatchCancelDropsCopiesNotYetInCS(t *testing.T) {
	for _, dir := range []string{"h2d", "d2h"} {
		t.Run(dir, func(t *testing.T) {
			e := newEngine(t, Config{})
			const ops, n = 256, 4096
			bg := context.Background()
			h, err := e.Alloc(ops*n, Host)
			require.NoError(t, err)
			d, err := e.Alloc(ops*n, Gaudi(0))
			require.NoError(t, err)
			zero, err := e.Alloc(ops*n, Host)
			require.NoError(t, err)
			src, dst := h, d
			if dir == "d2h" {
				src, dst = d, h
			}
			fill(h.Bytes(), 11)
			if dir == "d2h" {
				require.NoError(t, e.CopySync(bg, d.All(), h.All()))
			}
			require.NoError(t, e.CopySync(bg, dst.All(), zero.All()))
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			var once sync.Once
			hook := func(uint64) { once.Do(cancel) }
			e.cp.HookSubmitted.Store(&hook)
			b := e.NewBatch()
			for i := range ops {
				b.Copy(dst.Slice(i*n, n), src.Slice(i*n, n))
			}
			f := b.Submit(ctx)
			<-f.Done()
			e.cp.HookSubmitted.Store(nil)
			require.ErrorIs(t, f.Err(), ErrCanceled)
			require.ErrorIs(t, f.Err(), context.Canceled)
			out, err := e.Alloc(ops*n, Host)
			require.NoError(t, err)
			require.NoError(t, e.CopySync(bg, out.All(), dst.All()))
			want := make([]byte, ops*n)
			fill(want, 11)
			errs := f.Errs()
			require.Len(t, errs, ops)
			dropped := 0
			for i, err := range errs {
				got := out.Bytes()[i*n : (i+1)*n]
				if err == nil {
					require.Equal(t, want[i*n:(i+1)*n], got, "copy %d succeeded but its bytes differ", i)
					continue
				}
				require.ErrorIs(t, err, ErrCanceled, "copy %d", i)
				require.Equal(t, make([]byte, n), got, "dropped copy %d wrote its destination", i)
				dropped++
			}
			require.Positive(t, dropped, "the copies not yet in a CS when ctx ended ran all the same")
			require.Less(t, dropped, ops, "the first CS was submitted before ctx ended")
			require.Zero(t, e.Stats().InFlight)
		})
	}
}

// TestBatchRefusedWholeHasErrs: a batch refused as a whole before any
// copy is looked at (its ctx already ended or nil, the engine closed)
// resolves with one error per copy in Errs, every one the refusal, as a
// batch refused by its queue does; it used to be a plain future whose
// Errs was nil. An empty batch refused so stays a plain future.
func TestBatchRefusedWholeHasErrs(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		close bool
		want  error
	}{
		{"ctx canceled", canceled, false, ErrCanceled},
		{"nil ctx", nil, false, ErrInvalid},
		{"engine closed", context.Background(), true, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			a, err := e.Alloc(8192, Host)
			require.NoError(t, err)
			b := e.NewBatch()
			b.Copy(a.Slice(0, 4096), a.Slice(4096, 4096))
			b.Copy(a.Slice(4096, 4096), a.Slice(0, 4096))
			empty := e.NewBatch()
			if tc.close {
				require.NoError(t, e.Close())
			}
			f := b.Submit(tc.ctx)
			require.True(t, f.IsDone())
			require.ErrorIs(t, f.Err(), tc.want)
			errs := f.Errs()
			require.Len(t, errs, 2)
			for i, err := range errs {
				require.ErrorIs(t, err, tc.want, "copy %d", i)
			}
			f = empty.Submit(tc.ctx)
			require.ErrorIs(t, f.Err(), tc.want)
			require.Nil(t, f.Errs())
		})
	}
}
