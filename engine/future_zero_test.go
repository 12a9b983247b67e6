package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFutureZeroValue: a Future not made by the engine (a declared
// Future{}, or a nil *Future) is a resolved one whose result is
// ErrInvalid, whichever of its methods is called, concurrently too. A
// Future{} never resolved: Wait(context.Background()) blocked forever,
// Err said ErrNotDone for ever; a nil *Future panicked in every method.
func TestFutureZeroValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    *Future
	}{
		{"zero", &Future{}},
		{"nil", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			// Wait is bounded so that the test fails, not hangs, on a
			// future that never resolves.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := make(chan error, 8)
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					defer func() {
						if p := recover(); p != nil {
							errs <- recoveredErr{p}
						}
					}()
					errs <- f.Wait(ctx)
					select {
					case <-f.Done():
					case <-ctx.Done():
						errs <- ctx.Err()
						return
					}
					if !f.IsDone() {
						errs <- errNotResolved
					}
					errs <- f.Err()
					if f.Errs() != nil {
						errs <- errNotResolved
					}
				})
			}
			wg.Wait()
			close(errs)
			n := 0
			for err := range errs {
				require.ErrorIs(t, err, ErrInvalid)
				n++
			}
			require.Equal(t, 4, n)
		})
	}
}

var errNotResolved = newErr(ErrNotDone, "future not resolved", nil)

type recoveredErr struct{ p any }

func (r recoveredErr) Error() string { return "panic" }
