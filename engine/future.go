package engine

import (
	"context"
	"time"

	"github.com/gxfer/gxfer/internal/copier"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// ErrNotDone is what Future.Err returns while the future is still pending.
var ErrNotDone = gxerr.NotDone

// Future is the result of one or more asynchronous operations (a counted
// completion: it resolves when its last operation completes, with the first
// error any of them reported).
//
// Only the engine completes a future: its methods only observe it. Done is
// closed exactly once. Wait(ctx) bounds only the wait: a buffer used by the
// operation is the caller's again only once Done is closed.
//
// A Future not made by the engine (a declared Future{}, or a nil *Future)
// is a resolved one whose result is ErrInvalid.
type Future struct {
	f    copier.Future
	made bool // by the engine (init, initBatch, resolved)
}

// notMade stands in for a Future the engine did not make (see view).
var notMade = resolved(newErr(ErrInvalid, "future not made by the engine", nil))

// view is what f's observing methods read: f's completion, or notMade's
// for a Future the engine did not make (a declared one never resolves).
func (f *Future) view() *copier.Future {
	if f == nil || !f.made {
		return &notMade.f
	}
	return &f.f
}

// init makes f (new, or embedded in an operation's completer) resolve
// after n calls to complete.
func (f *Future) init(n int) {
	f.made = true
	f.f.Init(n)
}

// initBatch makes f a future of n operations with per-op status.
func (f *Future) initBatch(n int) {
	f.made = true
	f.f.InitBatch(n)
}

// newFuture returns a future that resolves after n calls to complete.
func newFuture(n int) *Future {
	f := &Future{}
	f.init(n)
	return f
}

// newBatchFuture returns a future for n operations with per-op status.
func newBatchFuture(n int) *Future {
	f := &Future{}
	f.initBatch(n)
	return f
}

// resolved returns an already completed future with err.
func resolved(err error) *Future {
	f := &Future{made: true}
	f.f.SetResolved(err)
	return f
}

// ResolvedFuture returns a future that is already complete with err, for
// code that hands out futures for work it did itself (err may be nil).
func ResolvedFuture(err error) *Future { return resolved(err) }

// setSpin sets how long Wait spins before blocking (call before sharing).
func (f *Future) setSpin(d time.Duration) { f.f.SetSpin(d) }

// complete records the end of one operation; idx is its index for per-op
// status (batches). Extra calls after resolution are ignored.
func (f *Future) complete(idx int, err error) { f.f.Complete(idx, err) }

// completeAll ends every remaining operation with err (used on shutdown).
func (f *Future) completeAll(err error) { f.f.CompleteAll(err) }

// completer returns f's completion view (cq.Completer, datapath.Completer)
// for the actors and data paths. *Future's own method set has no
// completing method, so code outside the engine cannot complete a future.
func (f *Future) completer() *copier.Future { return &f.f }

// Done returns a channel closed when the future resolves.
func (f *Future) Done() <-chan struct{} { return f.view().Done() }

// IsDone reports whether the future has resolved.
func (f *Future) IsDone() bool { return f.view().IsDone() }

// Err returns the result: nil on success, the first error, or ErrNotDone
// while pending.
func (f *Future) Err() error { return f.view().Err() }

// Errs returns the per-operation status of a batch future (nil entries
// succeeded), or nil for a plain future or while pending. The slice is
// the caller's: each call returns a new one.
func (f *Future) Errs() []error { return f.view().Errs() }

// Wait waits until the future resolves or ctx ends. It returns the
// future's result, or, if ctx ended first, ErrCanceled or ErrTimeout
// wrapping ctx's error; ending the wait does not cancel the operation
// (the ctx given to the operation does). A nil ctx is refused with
// ErrInvalid, whether or not the future has resolved.
func (f *Future) Wait(ctx context.Context) error { return f.view().Wait(ctx) }

// ErrCanceled: the operation's context was cancelled before the operation
// finished (errors.Is(err, context.Canceled) holds too). What had started
// on the hardware or the network finished first; the destination's content
// is undefined.
var ErrCanceled = gxerr.Canceled
