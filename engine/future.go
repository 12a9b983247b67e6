package engine

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/gxerr"
)

// ErrNotDone is what Future.Err returns while the future is still pending.
var ErrNotDone = gxerr.NotDone

// closedChan is shared by every resolved future; it is closed at init and
// never touched again.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Future is the result of one or more asynchronous operations (a counted
// completion: it resolves when its last operation completes, with the first
// error any of them reported).
//
// Only the engine completes a future: its methods only observe it. Done is
// closed exactly once. Wait(ctx) bounds only the wait: a buffer used by the
// operation is the caller's again only once Done is closed.
type Future struct {
	pending atomic.Int64
	done    atomic.Bool
	mu      sync.Mutex
	ch      chan struct{}
	err     error
	final   error   // err as of resolution; read without the lock once done
	errs    []error // per-op status (batches), nil otherwise
	spin    time.Duration
}

// newFuture returns a future that resolves after n calls to complete.
func newFuture(n int) *Future {
	f := &Future{}
	f.pending.Store(int64(n))
	return f
}

// newBatchFuture returns a future for n operations with per-op status.
func newBatchFuture(n int) *Future {
	f := newFuture(n)
	f.errs = make([]error, n)
	return f
}

// resolved returns an already completed future with err.
func resolved(err error) *Future {
	f := &Future{err: err, final: err, ch: closedChan}
	f.done.Store(true)
	return f
}

// ResolvedFuture returns a future that is already complete with err, for
// code that hands out futures for work it did itself (err may be nil).
func ResolvedFuture(err error) *Future { return resolved(err) }

// setSpin sets how long Wait spins before blocking (call before sharing).
func (f *Future) setSpin(d time.Duration) { f.spin = d }

// complete records the end of one operation; idx is its index for per-op
// status (ignored unless the future was made by newBatchFuture). It never
// blocks. Extra calls after resolution are ignored.
func (f *Future) complete(idx int, err error) {
	if f.done.Load() {
		return
	}
	if err != nil {
		f.mu.Lock()
		if f.errs != nil && idx >= 0 && idx < len(f.errs) && f.errs[idx] == nil {
			f.errs[idx] = err
		}
		if f.err == nil {
			f.err = err
		}
		f.mu.Unlock()
	}
	if f.pending.Add(-1) == 0 {
		f.resolve()
	}
}

// completeAll ends every remaining operation with err (used on shutdown).
func (f *Future) completeAll(err error) {
	f.mu.Lock()
	if f.done.Load() {
		f.mu.Unlock()
		return
	}
	if f.err == nil {
		f.err = err
	}
	for i := range f.errs {
		if f.errs[i] == nil {
			f.errs[i] = err
		}
	}
	f.mu.Unlock()
	f.pending.Store(0)
	f.resolve()
}

func (f *Future) resolve() {
	f.mu.Lock()
	if f.done.Load() {
		f.mu.Unlock()
		return
	}
	f.final = f.err
	f.done.Store(true)
	if f.ch == nil {
		f.ch = closedChan
	} else {
		close(f.ch)
	}
	f.mu.Unlock()
}

// futureCompleter is the view of a Future that the completion actors of
// package cq get (cq.Completer). It is unexported, so code outside the
// engine cannot complete a future: *Future's own method set has no
// completing method.
type futureCompleter Future

// Complete implements cq.Completer.
func (c *futureCompleter) Complete(idx int, err error) { (*Future)(c).complete(idx, err) }

// CompleteAll implements datapath.Completer.
func (c *futureCompleter) CompleteAll(err error) { (*Future)(c).completeAll(err) }

// completer returns f's completion view for the actors of package cq.
func (f *Future) completer() *futureCompleter { return (*futureCompleter)(f) }

// Done returns a channel closed when the future resolves.
func (f *Future) Done() <-chan struct{} {
	if f.done.Load() {
		return closedChan
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	return f.ch
}

// IsDone reports whether the future has resolved.
func (f *Future) IsDone() bool { return f.done.Load() }

// Err returns the result: nil on success, the first error, or ErrNotDone
// while pending.
func (f *Future) Err() error {
	if !f.done.Load() {
		return ErrNotDone
	}
	return f.final // written before done was set, never after
}

// Errs returns the per-operation status of a batch future (nil entries
// succeeded), or nil for a plain future or while pending.
func (f *Future) Errs() []error {
	if !f.done.Load() {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.errs
}

// Wait waits until the future resolves or ctx ends. It returns the
// future's result, or, if ctx ended first, ErrCanceled or ErrTimeout
// wrapping ctx's error; ending the wait does not cancel the operation
// (the ctx given to the operation does).
func (f *Future) Wait(ctx context.Context) error {
	if f.done.Load() {
		return f.Err()
	}
	if f.spin > 0 {
		deadline := time.Now().Add(f.spin)
		for i := 0; ; i++ {
			if f.done.Load() {
				return f.Err()
			}
			if i&63 == 63 && time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
		}
	}
	select {
	case <-f.Done():
		return f.Err()
	case <-ctx.Done():
		return ctxErr("waiting for the operation", ctx.Err())
	}
}

// ErrCanceled: the operation's context was cancelled before the operation
// finished (errors.Is(err, context.Canceled) holds too). What had started
// on the hardware or the network finished first; the destination's content
// is undefined.
var ErrCanceled = gxerr.Canceled
