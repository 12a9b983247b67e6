package copier

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// closedChan is shared by every resolved future; it is closed at init and
// never touched again.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Future is a counted completion: it resolves when its last operation
// completes, with the first error any of them reported. engine.Future
// holds one and offers only the observing methods. The zero Future is
// initialized with Init, InitBatch or SetResolved before it is shared.
type Future struct {
	pending atomic.Int64
	done    atomic.Bool
	// blocked: a caller waits on Done without polling the tickets. A
	// ticket attached after it kicked f's tickets (its CS was submitted
	// by a worker after the caller began to wait) is kicked by attach: a
	// device actor asleep while waiters watch its CSs would not look at
	// it before its sleep ends.
	blocked atomic.Bool
	mu      sync.Mutex
	ch      chan struct{}
	err     error
	final   error   // err as of resolution; read without the lock once done
	errs    []error // per-op status of a batch, made at its first error or Errs
	batch   int     // the operations of a batch (0: not a batch)
	spin    time.Duration
	// tickets are command submissions carrying this future's operations,
	// which Wait polls itself while it spins (see addTicket).
	tickets [maxTickets]atomic.Pointer[cq.Ticket]
	// job is the first job made for this future (ownJob): a copy, or a
	// batch's device copies, and its future then cost one allocation.
	job      Job
	jobTaken bool
}

// ownJob returns a new job for f's operations: the future's own the
// first time, an allocated one after. Called while f is set up, before
// anything shares it.
func (f *Future) ownJob() *Job {
	if f.jobTaken {
		return &Job{}
	}
	f.jobTaken = true
	return &f.job
}

// maxTickets bounds the command submissions a future's Wait polls; those
// of a larger batch are left to their devices' actors (a CS that finds no
// free slot is not attached).
const maxTickets = 4

// addTicket attaches a command submission carrying some of f's
// operations, for Wait to poll: a waiter that sees the CS end retires it
// on its own goroutine, without waiting for the device's actor to notice
// and hand the completion over. It takes a free slot, or one whose CS has
// retired, and reports whether it found one.
func (f *Future) addTicket(t *cq.Ticket) bool {
	if f.done.Load() {
		return false
	}
	for i := range f.tickets {
		old := f.tickets[i].Load()
		if (old == nil || old.Retired()) && f.tickets[i].CompareAndSwap(old, t) {
			return true
		}
	}
	return false
}

// kick wakes the actors of f's attached command submissions: a caller
// is about to wait for f without polling them (Done), or looks at it
// without waiting (IsDone, Err). An actor sleeping while waiters watch
// its CSs does not look at new ones until then (cq.Ticket.Watch).
func (f *Future) kick() {
	for i := range f.tickets {
		f.tickets[i].Load().Kick()
	}
}

// spinWait spins for up to f.spin, polling the command submissions of
// f's operations (the one that sees the last of them end resolves f
// here), and reports whether f resolved. The polled CSs are watched
// meanwhile: their device actor need not spin on them too. It ends early
// when ctx does (Wait bounds only the wait, by ctx, whatever the spin).
func (f *Future) spinWait(ctx context.Context) bool {
	var watched [maxTickets]*cq.Ticket
	for i := range f.tickets {
		if t := f.tickets[i].Load(); t != nil {
			t.Watch()
			watched[i] = t
		}
	}
	defer func() {
		for _, t := range watched {
			if t != nil {
				t.Unwatch()
			}
		}
	}()
	deadline := time.Now().Add(f.spin)
	var seen stamps
	for i := 0; ; i++ {
		if i&pollEvery == 0 {
			seen.read(f)
			f.pollTickets()
		} else if f.progressed(&seen) {
			f.pollTickets()
		}
		if f.done.Load() {
			return true
		}
		if i&63 == 0 && ctx.Err() != nil || i&63 == 63 && time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
}

// pollEvery+1 is how many looks at the completion sources' progress
// stamps a spinning Wait makes between polls it makes regardless of them
// (a stamp is a hint: see cq.Submission.Progress).
const pollEvery = 7

// stamps are the progress stamps of f's tickets as of the last poll.
type stamps struct {
	v  [maxTickets]uint64
	ok [maxTickets]bool
}

// read takes the stamps of f's tickets, before they are polled: a CS that
// ends after the poll moves its stamp past the one taken.
func (s *stamps) read(f *Future) {
	for i := range f.tickets {
		s.v[i], s.ok[i] = f.tickets[i].Load().Progress()
	}
}

// progressed reports whether a ticket of f may have ended since the
// stamps were read (its stamp moved, or it has none to look at), and
// reads them again: it is called before the poll it calls for.
func (f *Future) progressed(s *stamps) bool {
	moved := false
	for i := range f.tickets {
		t := f.tickets[i].Load()
		if t == nil {
			s.ok[i] = false
			continue
		}
		v, ok := t.Progress()
		if !ok || !s.ok[i] || v != s.v[i] {
			moved = true
		}
		s.v[i], s.ok[i] = v, ok
	}
	return moved
}

// pollTickets polls the attached command submissions once each, dropping
// the retired ones.
func (f *Future) pollTickets() {
	for i := range f.tickets {
		if t := f.tickets[i].Load(); t != nil && t.Poll() {
			f.tickets[i].CompareAndSwap(t, nil)
		}
	}
}

// Init makes f resolve after n calls to Complete.
func (f *Future) Init(n int) { f.pending.Store(int64(n)) }

// InitBatch makes f a future of n operations with per-op status.
func (f *Future) InitBatch(n int) {
	f.Init(n)
	f.batch = n
}

// errsLocked is the batch's per-op status, made when first needed (a
// batch that succeeds need not carry a slice of nils).
func (f *Future) errsLocked() []error {
	if f.errs == nil && f.batch > 0 {
		f.errs = make([]error, f.batch)
	}
	return f.errs
}

// SetResolved makes f an already completed future with err.
func (f *Future) SetResolved(err error) {
	f.err, f.final, f.ch = err, err, closedChan
	f.done.Store(true)
}

// NewFuture returns a future that resolves after n calls to Complete.
func NewFuture(n int) *Future {
	f := &Future{}
	f.Init(n)
	return f
}

// Resolved returns an already completed future with err.
func Resolved(err error) *Future {
	f := &Future{}
	f.SetResolved(err)
	return f
}

// SetSpin sets how long Wait spins before blocking (call before sharing).
func (f *Future) SetSpin(d time.Duration) { f.spin = d }

// Complete records the end of one operation; idx is its index for per-op
// status (ignored unless the future was initialized by InitBatch). It never
// blocks. Extra calls after resolution are ignored.
func (f *Future) Complete(idx int, err error) {
	if f.done.Load() {
		return
	}
	if err != nil {
		f.mu.Lock()
		if errs := f.errsLocked(); idx >= 0 && idx < len(errs) && errs[idx] == nil {
			errs[idx] = err
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

// CompleteN records the successful end of n operations (Complete(idx,
// nil) for each: a success leaves no per-op status to record).
func (f *Future) CompleteN(n int) {
	if f.done.Load() {
		return
	}
	if f.pending.Add(-int64(n)) == 0 {
		f.resolve()
	}
}

// CompleteAll ends every remaining operation with err.
func (f *Future) CompleteAll(err error) {
	f.mu.Lock()
	if f.done.Load() {
		f.mu.Unlock()
		return
	}
	if f.err == nil {
		f.err = err
	}
	errs := f.errsLocked()
	for i := range errs {
		if errs[i] == nil {
			errs[i] = err
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

// Done returns a channel closed when the future resolves.
func (f *Future) Done() <-chan struct{} {
	if f.done.Load() {
		return closedChan
	}
	// Set before the tickets are kicked: attach, which adds a ticket
	// before it reads the flag, kicks any ticket this kick misses.
	f.blocked.Store(true)
	f.kick()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	return f.ch
}

// IsDone reports whether the future has resolved.
func (f *Future) IsDone() bool {
	if f.done.Load() {
		return true
	}
	f.kick()
	return false
}

// Err returns the result: nil on success, the first error, or
// gxerr.NotDone while pending.
func (f *Future) Err() error {
	if !f.done.Load() {
		f.kick()
		return gxerr.NotDone
	}
	return f.final // written before done was set, never after
}

// Errs returns the per-operation status of a batch future, or nil for a
// plain future or while pending; a new slice each call.
func (f *Future) Errs() []error {
	if !f.done.Load() {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// The caller's own copy: writing to it must not change what later
	// calls, or other goroutines, read.
	return slices.Clone(f.errsLocked())
}

// Wait waits until the future resolves or ctx ends (then the typed error
// of ctx's end); ending the wait does not cancel the operation. A nil ctx
// is refused with gxerr.Invalid, whether or not the future has resolved.
func (f *Future) Wait(ctx context.Context) error {
	if ctx == nil {
		return gxerr.New(gxerr.Invalid, "wait: nil context", nil)
	}
	if f.done.Load() {
		return f.Err()
	}
	if f.spin > 0 && f.spinWait(ctx) {
		return f.Err()
	}
	select {
	case <-f.Done():
		return f.Err()
	case <-ctx.Done():
		return gxerr.Ctx("waiting for the operation", ctx.Err())
	}
}
