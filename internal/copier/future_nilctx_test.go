package copier

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gxerr"
)

// TestFutureWaitNilCtx: Wait(nil) is refused with gxerr.Invalid, whatever
// the state of the future, as the engine refuses a nil context elsewhere
// (engine/copy.go checkCtx). Before the fix a pending future's Wait(nil)
// panicked with a nil-pointer dereference (ctx.Done() on a nil interface)
// while a resolved one's returned its result: the outcome of the same
// call depended on whether the operation had finished yet.
func TestFutureWaitNilCtx(t *testing.T) {
	tests := []struct {
		name string
		f    func() *Future
	}{
		{"pending", func() *Future { return NewFuture(1) }},
		{"pending spinning", func() *Future { f := NewFuture(1); f.SetSpin(time.Microsecond); return f }},
		{"resolved", func() *Future { return Resolved(nil) }},
		{"resolved with error", func() *Future { return Resolved(gxerr.New(gxerr.Closed, "", nil)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f()
			res := make(chan error, 1)
			go func() {
				defer func() {
					if p := recover(); p != nil {
						res <- fmt.Errorf("panic: %v", p)
					}
				}()
				var nilCtx context.Context // the input under test
				res <- f.Wait(nilCtx)
			}()
			var err error
			select {
			case err = <-res:
			case <-time.After(10 * time.Second):
				t.Fatal("Wait(nil) did not return") // liveness bound only
			}
			require.ErrorIs(t, err, gxerr.Invalid)
			f.CompleteAll(nil) // a pending future ends: nothing waits on it
		})
	}
}
