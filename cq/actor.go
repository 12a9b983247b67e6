package cq

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// ErrClosed ends operations still outstanding when an actor is closed.
var ErrClosed = errors.New("cq: closed")

// CSWaiter is a device's completion source: WAIT_CS on one sequence number.
// done reports completion; err is the CS's failure (the CS is then retired
// too). A timeout of 0 polls; any other must bound the call (the driver's
// WAIT_CS does: hl_wait_for_fence), as the actor's Close waits for it.
type CSWaiter interface {
	WaitCS(seq uint64, timeout time.Duration) (done bool, err error)
}

// Submission is one outstanding command submission tracked by an actor.
type Submission struct {
	Seq uint64
	// Deadline, if not zero, is when the submission's operations time out.
	Deadline time.Time
	// OnDone is called exactly once when the CS retires: nil on success,
	// the CS error, or ErrClosed at shutdown. It runs on the actor
	// goroutine, on a waiter's that retired the CS through Ticket.Poll,
	// or (with ActorConfig.RetireHorizon) on the goroutine of a later
	// Track or TrackTicket that polled this old CS before the driver
	// forgets its outcome, or that waited for room past the deadline and
	// found the CS ended: a caller of Track must not hold a lock OnDone
	// takes. Never concurrently with OnTimeout. It must not block, nor
	// Close its own actor (Close waits for the actor, which waits for
	// the callback: both hang).
	OnDone func(err error)
	// OnTimeout, if set, is called on the actor goroutine when the deadline
	// passes before the CS retires (the CS is polled once more first), or
	// on the goroutine of its Track when that still waits for room
	// (ActorConfig.MaxOutstanding) then. It returns the next deadline to
	// watch (zero for none): a submission may carry operations with
	// different deadlines. One not after now is taken for now plus 1ms
	// (minRearm): OnTimeout is called again then, not at once (returning
	// now or a passed deadline made the actor, or the Track, call it and
	// OnDeadline over and over, a hot loop burning a core). OnDone still
	// follows.
	OnTimeout func(now time.Time) (next time.Time)
	// Progress, if set, is a cheap look at the completion source: a stamp
	// that changes whenever one of its submissions may have ended, read
	// without WAIT_CS (dma.Device.Progress); ok false when it cannot
	// tell. A waiter polling the ticket in a loop calls Poll only when
	// the stamp moved, and now and then regardless (Ticket.Progress).
	Progress func() (stamp uint64, ok bool)
}

// ActorConfig tunes a DeviceActor.
type ActorConfig struct {
	MaxOutstanding int           // Track waits while twice as many submissions are tracked (default 256, at most MaxDepth)
	MaxPoll        int           // WAIT_CS polls per sweep (default 16)
	Spin           time.Duration // spin-polling window after the last progress (default 50us)
	BlockTimeout   time.Duration // blocking WAIT_CS on the oldest CS when spinning ends, and the longest sleep while waiters watch every CS (default 1ms)
	IdleTimeout    time.Duration // safety-net wakeup while idle (default 100ms)
	// RetireHorizon, when > 0, bounds how far a submission may fall
	// behind the newest one tracked before it is polled: see horizon.go.
	// It is rounded up to a power of two, and clamped to MaxDepth.
	RetireHorizon int
	// OnDeadline is called (on the actor goroutine, or on that of a Track
	// waiting for room, so possibly concurrently) whenever a submission
	// misses its deadline, so the owner can check the device's health.
	OnDeadline func()
	Logger     zerolog.Logger
}

// MaxDepth bounds the sizes the actors allocate up front:
// ActorConfig.MaxOutstanding and RetireHorizon, and NewHostActor's depth
// (a larger one is clamped). Each is a channel or slice allocated whole
// when the actor starts (8 MiB at this bound), so a huge one ended the
// process in make ("fatal error: runtime: out of memory", which no
// recover catches). No larger one is useful: a device holds at most its
// driver's max_pending_cs submissions in flight (64 by default), the
// driver keeps the outcome of the last 256 that ended (see horizon.go),
// and a host actor's inbox holds the completions of at most the host
// queue's jobs, which package queue bounds the same way
// (queue.MaxCapacity).
const MaxDepth = 1 << 20

func (c *ActorConfig) defaults() {
	if c.MaxOutstanding <= 0 {
		c.MaxOutstanding = 256
	}
	c.MaxOutstanding = min(c.MaxOutstanding, MaxDepth)
	if c.MaxPoll <= 0 {
		c.MaxPoll = 16
	}
	if c.Spin < 0 {
		c.Spin = 0
	} else if c.Spin == 0 {
		c.Spin = 50 * time.Microsecond
	}
	if c.BlockTimeout <= 0 {
		c.BlockTimeout = time.Millisecond
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 100 * time.Millisecond
	}
	c.RetireHorizon = min(max(c.RetireHorizon, 0), MaxDepth)
}

// Ticket is one tracked submission. The actor retires it; a waiter may
// also poll it (Poll) and retire it on its own goroutine when it sees the
// CS end first, so that a caller waiting on a single CS needs no hand-off
// through the actor. Whoever retires it first runs OnDone; the other only
// drops it.
type Ticket struct {
	Submission
	a        *DeviceActor
	state    atomic.Uint32 // ticketIdle, ticketBusy or ticketRetired
	watchers atomic.Int32  // waiters polling it now (Watch)
}

// Watch tells the actor that a waiter is polling the ticket (until
// Unwatch): the actor then leaves the ticket to the waiter, and while
// every CS it tracks is watched it sleeps instead of spin-polling them,
// leaving the cores to the waiters and the device. A watcher polls the
// ticket until it retires or it unwatches.
//
// While it sleeps so, new submissions do not wake it: their submitters
// usually watch them next, and a wake-up per submission puts the actor on
// the core its waiter needs. What needs the actor wakes it (Kick): the
// last watcher leaving a ticket not retired (Unwatch does that), a
// submission nobody will watch (Track does that; the holder of a Ticket
// it will not watch kicks it), a caller that starts waiting on a
// channel, a submission with a deadline (TrackTicket does that).
// Otherwise it looks again after ActorConfig.BlockTimeout, or at the
// earliest deadline.
func (t *Ticket) Watch() { t.watchers.Add(1) }

// Unwatch ends a Watch. The last watcher to leave a ticket that is not
// retired wakes the actor, which retires it from then on. An Unwatch
// with no Watch left to end does nothing (a negative count would make
// the actor take the ticket for watched).
func (t *Ticket) Unwatch() {
	for {
		n := t.watchers.Load()
		if n <= 0 {
			return
		}
		if t.watchers.CompareAndSwap(n, n-1) {
			if n == 1 {
				t.Kick()
			}
			return
		}
	}
}

// Kick wakes the ticket's actor if it sleeps while waiters watch every
// CS it tracks (see Watch): the ticket needs it.
func (t *Ticket) Kick() {
	if t != nil && !t.Retired() {
		t.a.Kick()
	}
}

const (
	ticketIdle    = iota
	ticketBusy    // claimed by the actor or a waiter polling it (or in OnTimeout)
	ticketRetired // OnDone has been claimed
)

// Retired reports whether the ticket's OnDone has been claimed (it may
// still be running on the goroutine that claimed it).
func (t *Ticket) Retired() bool { return t.state.Load() == ticketRetired }

// Poll checks the ticket's CS once (WAIT_CS with timeout 0) and, when it
// has ended, retires the ticket on the calling goroutine: OnDone runs
// here, not on the actor. It reports whether the ticket is retired (by
// this call or before it). After the actor exited every ticket is
// retired. A nil ticket is retired.
func (t *Ticket) Poll() bool {
	if t == nil {
		return true
	}
	switch t.state.Load() {
	case ticketRetired:
		return true
	case ticketBusy:
		return false
	}
	a := t.a
	// The read lock keeps the actor from exiting between the check of
	// exited and callbacks.Add; the actor's exit then waits for the
	// OnDone run here (callbacks), which so runs without the lock: it may
	// Track or Poll on this actor, whose read lock would wait behind a
	// pending writer (the actor closing) that waits for this one.
	a.exitMu.RLock()
	if a.exited {
		a.exitMu.RUnlock()
		// The actor ends every ticket before it exits, but may not
		// have claimed this one yet.
		return t.state.Load() == ticketRetired
	}
	// Claim the ticket before WAIT_CS: a completion source may report an
	// ended CS's outcome once (later WAIT_CSs say COMPLETED), so whoever
	// sees it end must be the one that retires it.
	if !t.state.CompareAndSwap(ticketIdle, ticketBusy) {
		a.exitMu.RUnlock()
		return t.state.Load() == ticketRetired
	}
	done, err := a.w.WaitCS(t.Seq, 0)
	a.waiterPolls.Add(1)
	if !done {
		t.state.Store(ticketIdle)
		a.exitMu.RUnlock()
		return false
	}
	a.callbacks.Add(1)
	a.exitMu.RUnlock()
	defer a.callbacks.Done()
	t.state.Store(ticketRetired)
	a.horizon.drop(t)
	// Counted out before OnDone: the goroutine it wakes may read
	// Outstanding for its next submission at once.
	a.waiterRetired.Add(1)
	a.retired.Add(1)
	a.release()
	a.safeCall(func() { t.OnDone(err) })
	return true
}

// DeviceActor is the one goroutine that reaps a device's command
// submissions. While work is in flight it polls WAIT_CS (timeout 0) over the
// outstanding sequence numbers in bounded sweeps, spins for a short window
// after progress, then blocks in a short WAIT_CS on the oldest (made on a
// goroutine of its own, the actor keeping the others' deadlines meanwhile;
// or, when waiters watch every CS it tracks, sleeps: see Ticket.Watch); when
// nothing is outstanding it keeps polling its submission channel for the
// rest of the spin window (a submission then needs no wake-up), then
// sleeps on it with a periodic safety-net timeout. The spin is bounded:
// an idle actor burns no CPU. A waiter holding a submission's Ticket may
// retire it first (Ticket.Poll): the actor then only drops it.
type DeviceActor struct {
	name string
	w    CSWaiter
	cfg  ActorConfig
	log  zerolog.Logger

	in      chan *Ticket
	slots   chan struct{} // a token per submission tracked (outstanding): Track waits for room here
	kick    chan struct{} // Kick's token (one: a Kick never blocks)
	exitMu  sync.RWMutex
	exited  bool
	refused bool // Track refuses submissions (exitMu): Close found none pending
	stop    chan struct{}
	stopped chan struct{}
	grace   atomic.Int64
	once    sync.Once

	// callbacks counts the OnDones Ticket.Poll runs (added under
	// exitMu's read lock while not exited): exit waits for them.
	callbacks sync.WaitGroup

	outstanding atomic.Int64
	polls       atomic.Uint64
	blocks      atomic.Uint64
	retired     atomic.Uint64
	parks       atomic.Uint64

	horizon horizon

	waiterPolls   atomic.Uint64
	waiterRetired atomic.Uint64
	sleeps        atomic.Uint64
	kicks         atomic.Uint64
}

// NewDeviceActor starts the actor for one completion source.
func NewDeviceActor(name string, w CSWaiter, cfg ActorConfig) *DeviceActor {
	cfg.defaults()
	a := &DeviceActor{
		name:    name,
		w:       w,
		cfg:     cfg,
		log:     cfg.Logger.With().Str("component", "cq").Str("source", name).Logger(),
		in:      make(chan *Ticket, cfg.MaxOutstanding),
		slots:   make(chan struct{}, 2*cfg.MaxOutstanding),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
		horizon: newHorizon(cfg.RetireHorizon),
	}
	go a.run()
	return a
}

// Kick wakes the actor if it sleeps while waiters watch every CS it
// tracks (see Ticket.Watch), or makes its next such sleep end at once. It
// never blocks.
func (a *DeviceActor) Kick() {
	select {
	case a.kick <- struct{}{}:
		a.kicks.Add(1)
	default:
	}
}

// release counts a submission out (it retired, or its Track failed),
// making room for another.
func (a *DeviceActor) release() {
	a.outstanding.Add(-1)
	<-a.slots
}

// Outstanding is the number of submissions not yet retired. A
// submission is counted out before its OnDone runs.
func (a *DeviceActor) Outstanding() int { return int(a.outstanding.Load()) }

// ActorStats are an actor's counters.
type ActorStats struct {
	Outstanding int
	Polls       uint64 // non-blocking WAIT_CS calls
	Blocks      uint64 // blocking WAIT_CS calls
	Retired     uint64 // submissions retired
	// Parks counts the times the actor, with nothing outstanding and its
	// spin window over, went to sleep on its submission channel (the next
	// Track then wakes it).
	Parks uint64
	// WaiterPolls counts Ticket.Poll's WAIT_CS calls; WaiterRetired the
	// submissions retired by a waiter instead of the actor (included in
	// Retired).
	WaiterPolls   uint64
	WaiterRetired uint64
	// Sleeps counts the times the actor slept because waiters polled
	// every CS it tracked.
	Sleeps uint64
	// Kicks counts the Kicks that found no token pending (each wakes the
	// actor from such a sleep, or ends its next one at once).
	Kicks uint64
	// HorizonPolls counts the submissions a Track polled because they
	// fell RetireHorizon behind it unretired (see horizon.go).
	HorizonPolls uint64
}

// Stats returns the counters.
func (a *DeviceActor) Stats() ActorStats {
	return ActorStats{Outstanding: a.Outstanding(), Polls: a.polls.Load(), Blocks: a.blocks.Load(), Retired: a.retired.Load(), Parks: a.parks.Load(),
		WaiterPolls: a.waiterPolls.Load(), WaiterRetired: a.waiterRetired.Load(), Sleeps: a.sleeps.Load(), Kicks: a.kicks.Load(),
		HorizonPolls: a.horizon.polls.Load()}
}

// AddCounters adds o's counters to s, leaving s's gauge (Outstanding):
// the counts of an actor that replaced o's (a device opened again after
// its reset) then go on from where o's stopped.
func (s *ActorStats) AddCounters(o ActorStats) {
	s.Polls += o.Polls
	s.Blocks += o.Blocks
	s.Retired += o.Retired
	s.Parks += o.Parks
	s.WaiterPolls += o.WaiterPolls
	s.WaiterRetired += o.WaiterRetired
	s.Sleeps += o.Sleeps
	s.Kicks += o.Kicks
	s.HorizonPolls += o.HorizonPolls
}

// Close stops accepting submissions, keeps reaping the outstanding ones for
// up to grace, then ends the rest with ErrClosed and returns once the actor
// goroutine has exited. Idempotent; always finishes: a blocking WAIT_CS
// under way when Close begins (ActorConfig.BlockTimeout at most) ends
// first, later ones last no longer than what is left of grace. A
// Submission's callback must not call it (see OnDone).
func (a *DeviceActor) Close(grace time.Duration) {
	a.once.Do(func() {
		a.grace.Store(int64(grace))
		close(a.stop)
	})
	<-a.stopped
}

func (a *DeviceActor) run() {
	defer close(a.stopped)
	var pending []*Ticket
	lastProgress := time.Now()
	var stopAt time.Time
	cursor := 0
	var stamp sweepStamp
	idle := time.NewTimer(a.cfg.IdleTimeout)
	defer idle.Stop()

	// relied is whether the actor retired the last CS it saw end itself
	// (no waiter polled it first): then it spins for new submissions
	// when idle, else it parks at once.
	relied := true
	// retire ends pending[i], which the actor holds (ticketBusy), with err.
	retire := func(i int, err error) {
		t := pending[i]
		pending[i] = nil
		relied = true
		t.state.Store(ticketRetired)
		a.horizon.drop(t)
		a.retired.Add(1) // before OnDone, as in Ticket.Poll
		a.release()
		a.safeCall(func() { t.OnDone(err) })
	}
	// claim takes pending[i] for a WAIT_CS; false if a waiter holds it
	// now or retired it (then it is dropped).
	claim := func(i int) bool {
		t := pending[i]
		if t.state.CompareAndSwap(ticketIdle, ticketBusy) {
			return true
		}
		if t.state.Load() == ticketRetired {
			pending[i] = nil
			relied = false
		}
		return false
	}
	// poll polls pending[i] (claimed) once with timeout: retired when it
	// ended, else released.
	poll := func(i int, timeout time.Duration) bool {
		done, err := a.w.WaitCS(pending[i].Seq, timeout)
		if done {
			retire(i, err)
			return true
		}
		pending[i].state.Store(ticketIdle)
		return false
	}
	// finish ends pending[i] with err at shutdown (no waiter polls then).
	finish := func(i int, err error) {
		if pending[i].state.CompareAndSwap(ticketIdle, ticketBusy) {
			retire(i, err)
		}
		pending[i] = nil
	}
	compact := func() {
		j := 0
		for _, t := range pending {
			if t != nil {
				pending[j] = t
				j++
			}
		}
		clear(pending[j:])
		pending = pending[:j]
	}
	// takeIn takes the submissions waiting in the channel, without
	// blocking.
	takeIn := func() {
		for range cap(a.in) {
			select {
			case s := <-a.in:
				pending = append(pending, s)
			default:
				return
			}
		}
	}
	stopping := func() bool {
		select {
		case <-a.stop:
			if stopAt.IsZero() {
				stopAt = time.Now().Add(time.Duration(a.grace.Load()))
			}
			return true
		default:
			return false
		}
	}

	// expire times out the submissions past their deadline at now,
	// polling each once more first; true when one retired (or a waiter
	// retired it).
	expire := func(now time.Time) (progressed bool) {
		missed := false
		for i, t := range pending {
			if t == nil || t.Deadline.IsZero() || !now.After(t.Deadline) {
				continue
			}
			// Held (busy), it is not retired by a waiter while its
			// OnTimeout runs.
			if !claim(i) {
				progressed = progressed || pending[i] == nil
				continue // a waiter holds it: next pass
			}
			done, err := a.w.WaitCS(t.Seq, 0)
			a.polls.Add(1)
			if done {
				retire(i, err)
				progressed = true
				continue
			}
			missed = true
			next := time.Time{}
			if t.OnTimeout != nil {
				a.safeCall(func() { next = t.OnTimeout(now) })
			}
			t.Deadline = rearm(next, now)
			t.state.Store(ticketIdle)
		}
		compact()
		if missed && a.cfg.OnDeadline != nil {
			a.safeCall(a.cfg.OnDeadline)
		}
		return progressed
	}
	// block polls pending[i] (claimed) with timeout, a blocking WAIT_CS,
	// on a goroutine of its own, while the actor keeps the deadlines of
	// the others, also of those tracked meanwhile (their Track kicks it):
	// else a deadline would be kept a whole BlockTimeout late. It returns
	// once the WAIT_CS has: true when the CS ended (it is retired).
	type waitResult struct {
		done bool
		err  error
	}
	waited := make(chan waitResult, 1)
	block := func(i int, timeout time.Duration) bool {
		bt := pending[i]
		go func() {
			done, err := a.w.WaitCS(bt.Seq, timeout)
			waited <- waitResult{done, err}
		}()
		for {
			// The earliest deadline of the others: bt's bounds timeout.
			d := time.Hour
			for _, t := range pending {
				if t != bt && !t.Deadline.IsZero() {
					d = min(d, t.Deadline.Sub(time.Now()))
				}
			}
			// One a waiter holds when it is due is looked at again
			// shortly after.
			idle.Reset(max(d, 50*time.Microsecond))
			select {
			case r := <-waited:
				i = slices.Index(pending, bt) // busy: nobody dropped it
				if r.done {
					retire(i, r.err)
					compact()
					return true
				}
				bt.state.Store(ticketIdle)
				return false
			case <-a.kick:
				// Take the submissions tracked meanwhile, and their
				// deadlines.
				takeIn()
			case <-idle.C:
			}
			expire(time.Now())
		}
	}

	for {
		// Take new submissions without blocking: all of them, so that
		// their deadlines are kept (Track's room is slots).
		takeIn()
		if len(pending) == 0 {
			if stopping() {
				// Refuse further submissions first: one Track accepted
				// since the drain above is polled in the grace, as the
				// others were, not ended unpolled by exit.
				a.refuse()
				if len(a.in) > 0 {
					continue
				}
				a.exit()
				return
			}
			// Keep polling for new submissions for the rest of the spin
			// window: a submission that arrives then costs no wake-up.
			// Not when waiters retired what it saw last: they do not
			// wait for the actor, which would only take a core from them.
			if !relied {
				lastProgress = time.Time{}
			}
			if s, ok := a.spinIdle(lastProgress); ok {
				pending = append(pending, s)
				lastProgress = time.Now()
				continue
			}
			a.parks.Add(1)
			idle.Reset(a.cfg.IdleTimeout)
			select {
			case s := <-a.in:
				pending = append(pending, s)
				lastProgress = time.Now()
			case <-a.stop:
			case <-idle.C:
			}
			continue
		}

		// One bounded sweep of non-blocking polls; the window rotates so
		// that every outstanding CS is polled, not only the oldest.
		progressed := false
		n := min(len(pending), a.cfg.MaxPoll)
		if cursor >= len(pending) {
			cursor = 0
		}
		still := stamp.still(pending, n)
		for k := 0; k < n; k++ {
			i := (cursor + k) % len(pending)
			if pending[i] == nil {
				continue
			}
			if pending[i].Retired() { // by a waiter
				pending[i] = nil
				progressed, relied = true, false
				continue
			}
			if still || pending[i].watchers.Load() > 0 || !claim(i) {
				continue // its waiter polls it and retires it, or nothing ended since the last polls
			}
			a.polls.Add(1)
			if poll(i, 0) {
				progressed = true
			}
		}
		cursor += n
		compact()

		// Deadlines: a CS past its deadline is polled once more before its
		// operations are timed out.
		now := time.Now()
		if expire(now) {
			progressed = true
		}

		if stopping() && now.After(stopAt) {
			a.markExited() // no waiter polls a ticket from here on
			for i := range pending {
				finish(i, ErrClosed)
			}
			pending = pending[:0]
			a.exit()
			return
		}

		if progressed {
			lastProgress = now
			continue
		}
		if len(pending) == 0 {
			continue
		}
		oldest := firstUnwatched(pending)
		if oldest < 0 {
			// Waiters poll every CS tracked and retire them: sleep until
			// kicked (see Ticket.Watch), for no longer than a blocking
			// wait or until the earliest deadline. Submissions meanwhile
			// wait in a.in.
			// In Close's grace (stopping above set stopAt), stop is
			// closed: the sleep ends at the grace's end instead, else
			// the actor would loop for the whole grace.
			a.sleeps.Add(1)
			d := min(a.cfg.BlockTimeout, untilDeadline(pending, now))
			stop := a.stop
			if !stopAt.IsZero() {
				stop = nil
				d = min(d, stopAt.Sub(now))
			}
			idle.Reset(max(d, time.Microsecond))
			select {
			case <-a.kick:
			case <-stop:
			case <-idle.C:
			}
			continue
		}
		if now.Sub(lastProgress) < a.cfg.Spin {
			runtime.Gosched()
			continue
		}
		// Block on the oldest outstanding CS nobody watches for a short
		// while.
		if !claim(oldest) {
			compact()
			runtime.Gosched()
			continue
		}
		// Not past the earliest deadline (it would fire a whole
		// BlockTimeout late), and in Close's grace for no longer than
		// what is left of it.
		timeout := max(min(a.cfg.BlockTimeout, untilDeadline(pending, now)), 0)
		if !stopAt.IsZero() {
			timeout = max(min(timeout, stopAt.Sub(now)), 0)
		}
		a.blocks.Add(1)
		if block(oldest, timeout) {
			lastProgress = time.Now()
		}
	}
}

// untilDeadline is the time from now to the earliest deadline of
// pending (an hour when none has one).
func untilDeadline(pending []*Ticket, now time.Time) time.Duration {
	d := time.Hour
	for _, t := range pending {
		if !t.Deadline.IsZero() {
			d = min(d, t.Deadline.Sub(now))
		}
	}
	return d
}

// firstUnwatched is the index of the first ticket no waiter watches, or
// -1.
func firstUnwatched(pending []*Ticket) int {
	for i, t := range pending {
		if t.watchers.Load() == 0 {
			return i
		}
	}
	return -1
}

// spinIdle polls the submission channel until the spin window that
// started at lastProgress ends; false when it ended (or Close began)
// with nothing submitted.
func (a *DeviceActor) spinIdle(lastProgress time.Time) (*Ticket, bool) {
	deadline := lastProgress.Add(a.cfg.Spin)
	for i := 0; ; i++ {
		select {
		case s := <-a.in:
			return s, true
		case <-a.stop:
			return nil, false
		default:
		}
		if i&15 == 0 && !time.Now().Before(deadline) {
			return nil, false
		}
		runtime.Gosched()
	}
}

// markExited refuses further submissions and polls by waiters; it waits
// for the polls under way.
func (a *DeviceActor) markExited() {
	a.exitMu.Lock()
	a.exited = true
	a.exitMu.Unlock()
}

// refuse makes Track refuse further submissions; it waits for the Tracks
// under way.
func (a *DeviceActor) refuse() {
	a.exitMu.Lock()
	a.refused = true
	a.exitMu.Unlock()
}

// exit refuses further submissions and ends the ones still queued.
func (a *DeviceActor) exit() {
	a.markExited()
	for {
		select {
		case s := <-a.in:
			if !s.state.CompareAndSwap(ticketIdle, ticketRetired) {
				continue // retired by a waiter (none polls now)
			}
			a.horizon.drop(s)
			a.retired.Add(1) // before OnDone, as in Ticket.Poll
			a.release()
			a.safeCall(func() { s.OnDone(ErrClosed) })
		default:
			a.horizon.clear()
			a.callbacks.Wait()
			return
		}
	}
}

// safeCall runs a callback, turning a panic into a logged error so that the
// actor keeps serving its other submissions.
func (a *DeviceActor) safeCall(fn func()) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error().Str("panic", fmt.Sprint(r)).Msg("completion callback panicked")
		}
	}()
	fn()
}
