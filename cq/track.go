package cq

import (
	"context"
	"fmt"
	"os"
	"time"
)

// ErrInvalid refuses bad input: a nil context.
var ErrInvalid = fmt.Errorf("cq: %w", os.ErrInvalid)

// Track hands a submitted CS to the actor. It waits while twice
// MaxOutstanding submissions are tracked, until ctx ends; should s's
// deadline pass meanwhile, it polls the CS once and retires it there if
// it ended, else runs s.OnTimeout and goes on waiting. After Close it
// returns ErrClosed and the caller still owns s (and must end it); so
// too when ctx is nil (ErrInvalid: accepted while there is room, it
// would panic only once Track waits for room, under load).
//
// Nobody can watch or kick a submission tracked so (it has no Ticket), so
// Track wakes the actor should it sleep while waiters watch every other
// CS (see Ticket.Watch).
func (a *DeviceActor) Track(ctx context.Context, s Submission) error {
	_, err := a.TrackTicket(ctx, s)
	if err == nil {
		a.Kick()
	}
	return err
}

// TrackTicket is Track returning the submission's Ticket, which a waiter
// may Poll to retire the CS itself.
func (a *DeviceActor) TrackTicket(ctx context.Context, s Submission) (*Ticket, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalid)
	}
	t, err := a.track(ctx, s)
	if err == nil {
		a.horizon.pass(t)
	}
	return t, err
}

func (a *DeviceActor) track(ctx context.Context, s Submission) (*Ticket, error) {
	t := &Ticket{Submission: s, a: a}
	var expiry *time.Timer // the deadline while t waits for room
	defer func() {
		if expiry != nil {
			expiry.Stop()
		}
	}()
	for {
		queued, err := a.enqueue(ctx, t, &expiry)
		if err != nil {
			return nil, err
		}
		if queued {
			return t, nil
		}
		// Its deadline passed while it waited for room.
		retired, err := a.expireQueued(t)
		if err != nil {
			return nil, err
		}
		if retired {
			return t, nil
		}
	}
}

// enqueue hands t to the actor, waiting for room until ctx ends, Close
// begins or t's deadline passes (false): *expiry is the timer of that
// wait, made at the first.
func (a *DeviceActor) enqueue(ctx context.Context, t *Ticket, expiry **time.Timer) (bool, error) {
	// The read lock makes Track and the actor's exit mutually exclusive:
	// a submission is either refused or seen by the actor's final drain.
	a.exitMu.RLock()
	defer a.exitMu.RUnlock()
	if a.exited || a.refused {
		return false, ErrClosed
	}
	select {
	case <-a.stop:
		return false, ErrClosed
	default:
	}
	// Read before the send: the actor writes it once it has t.
	deadline := t.Deadline
	select {
	case a.slots <- struct{}{}:
	default:
		// No room: the actor may be asleep while waiters watch (see
		// Ticket.Watch), the submissions piling up; it retires the
		// ones that ended now.
		a.Kick()
		var due <-chan time.Time
		if !deadline.IsZero() {
			if *expiry == nil {
				*expiry = time.NewTimer(time.Until(deadline))
			} else {
				(*expiry).Reset(time.Until(deadline))
			}
			due = (*expiry).C
		}
		select {
		case a.slots <- struct{}{}:
		case <-a.stop:
			return false, ErrClosed
		case <-ctx.Done():
			return false, ctx.Err()
		case <-due:
			return false, nil
		}
	}
	a.outstanding.Add(1)
	select {
	case a.in <- t:
	default:
		// The actor takes every submission handed to it, but may be
		// busy (in a callback) or asleep while waiters watch: wake it.
		a.Kick()
		select {
		case a.in <- t:
			// Again: that Kick may have woken a drain that ended
			// (it takes what the channel held) before t landed, and
			// the actor, all it took watched, sleeps again.
			a.Kick()
		case <-a.stop:
			a.release()
			return false, ErrClosed
		case <-ctx.Done():
			a.release()
			return false, ctx.Err()
		}
	}
	if !deadline.IsZero() {
		a.Kick() // its deadline is the actor's to watch, also while it sleeps
	}
	return true, nil
}

// expireQueued does for t, whose deadline passed while its Track waited
// for room, what the actor does for a tracked CS past its deadline, on
// the Track's goroutine (nobody else has t yet): it polls the CS once and
// retires t if it ended (true), else runs its OnTimeout, takes the next
// deadline, and reports the miss to OnDeadline. ErrClosed once Close
// made the actor refuse submissions (the caller still owns t's CS).
func (a *DeviceActor) expireQueued(t *Ticket) (bool, error) {
	a.exitMu.RLock()
	if a.exited || a.refused {
		a.exitMu.RUnlock()
		return false, ErrClosed
	}
	// The actor's exit waits for the callbacks run here, as for Poll's.
	a.callbacks.Add(1)
	a.exitMu.RUnlock()
	defer a.callbacks.Done()
	now := time.Now()
	done, err := a.w.WaitCS(t.Seq, 0)
	a.polls.Add(1)
	if done {
		t.state.Store(ticketRetired)
		a.retired.Add(1)
		a.safeCall(func() { t.OnDone(err) })
		return true, nil
	}
	next := time.Time{}
	if t.OnTimeout != nil {
		a.safeCall(func() { next = t.OnTimeout(now) })
	}
	t.Deadline = rearm(next, now)
	if a.cfg.OnDeadline != nil {
		a.safeCall(a.cfg.OnDeadline)
	}
	return false, nil
}

// minRearm is the least time after a missed deadline that the next one
// OnTimeout returns is kept at (see Submission.OnTimeout).
const minRearm = time.Millisecond

// rearm is the next deadline OnTimeout returned when it was given now:
// one not after now is now plus minRearm, else the submission would be
// timed out again at once, over and over.
func rearm(next, now time.Time) time.Time {
	if next.IsZero() || next.After(now) {
		return next
	}
	return now.Add(minRearm)
}

// Progress is the stamp of the ticket's completion source
// (Submission.Progress): a waiter that saw it unchanged since its last
// Poll can skip the next one. ok is false when the ticket has no such
// stamp or it cannot be read now: poll then.
func (t *Ticket) Progress() (stamp uint64, ok bool) {
	if t == nil || t.Submission.Progress == nil {
		return 0, false
	}
	return t.Submission.Progress()
}

// sweepStamp is an actor's view of its completion source's progress
// stamp (Submission.Progress; its tickets share one source): a sweep
// polls only when the stamp moved since the last sweep that read it,
// there is none, or every sweepEvery+1 sweeps (it is a hint). A sweep
// polls one window of MaxPoll tickets, the windows taking turns: once the
// stamp moved (or at the every-8th sweep), the sweeps that follow poll
// until every window has been, so that a CS that ended in any of them is
// retired, not only one in the window of the sweep that saw the move.
type sweepStamp struct {
	v      uint64
	ok     bool
	sweeps int
	left   int // tickets still to poll since the stamp moved
}

const sweepEvery = 7

// still reports whether this sweep, polling a window of n tickets of
// pending, may skip its polls. It takes the stamp before the polls: a CS
// that ends after them moves it.
func (s *sweepStamp) still(pending []*Ticket, n int) bool {
	s.sweeps++
	var v uint64
	ok := false
	for _, t := range pending {
		if t != nil {
			v, ok = t.Progress()
			break
		}
	}
	if !ok || !s.ok || v != s.v || s.sweeps&sweepEvery == 0 {
		s.left = len(pending)
	}
	s.v, s.ok = v, ok
	if s.left <= 0 {
		return true
	}
	s.left -= n
	return false
}
