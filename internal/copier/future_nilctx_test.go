package copier

import (
	"context"
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
			var nilCtx context.Context // the input under test
			var err error
			require.NotPanics(t, func() { err = f.Wait(nilCtx) })
			require.ErrorIs(t, err, gxerr.Invalid)
			f.CompleteAll(nil) // a pending future ends: nothing waits on it
		})
	}
}
