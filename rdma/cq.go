package rdma

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/verbs"
)

// Completer receives a work request's completion, exactly once: on the
// CQ's goroutine, or for a Manual CQ on the goroutine calling Progress (or
// QP.Do, QP.Close), or on the goroutine of a QP.Close that gave up waiting
// for a flush. It must not block. The work request's queue entry is already
// free when it runs, so it may post again.
type Completer interface {
	Complete(c Completion)
}

// CompleterFunc adapts a function to Completer.
type CompleterFunc func(c Completion)

// Complete calls f(c).
func (f CompleterFunc) Complete(c Completion) { f(c) }

// Completion is the result of one work request.
type Completion struct {
	Op      OpKind
	Err     error  // nil on success; a *CompletionError, or ErrClosed
	Status  Status // StatusSuccess on success
	ByteLen uint32 // received bytes (OpRecv); RDMA read/write: as the device reports
	Imm     uint32 // immediate data (OpRecv, with HasImm)
	HasImm  bool
	QPN     uint32 // the local QP
}

// CQConfig tunes a CQ. The zero value is a good default.
type CQConfig struct {
	// Size is the number of CQ entries and the most work requests in
	// flight on the CQ (default 1024).
	Size int
	// Batch is the most completions one poll (one cgo call) returns
	// (default 64; at most Size and MaxCQBatch).
	Batch int
	// BusyPoll polls without ever sleeping: lowest latency, and it keeps a
	// CPU core busy for as long as the CQ is open. No completion channel is
	// created.
	BusyPoll bool
	// Manual starts no goroutine: completions are delivered only when the
	// owner calls Progress (UCX-style progress from the caller's goroutine:
	// lowest latency when one goroutine posts and waits; QP.Do progresses
	// the CQ itself). Exclusive with BusyPoll.
	Manual bool
	// Spin keeps polling this long after the last completion before the
	// CQ is armed and its goroutine sleeps (default 0: sleep at once).
	Spin time.Duration
	// IdleTimeout is the safety-net poll interval while asleep
	// (default 250ms).
	IdleTimeout time.Duration
	// AckEvery acknowledges completion events in batches of this many
	// (default 32).
	AckEvery int
	// Vector is the completion vector (interrupt) to use.
	Vector int
}

// MaxCQBatch bounds CQConfig.Batch: NewCQ allocates that many
// completion records up front, and a device that reports no CQ size
// limit leaves Size unbounded, so a huge Batch ended the process in make.
// One poll never needs more: at 4096 completions a cgo call, the call's
// cost is already nothing next to the completions' handling.
const MaxCQBatch = 4096

func (c *CQConfig) defaults() {
	if c.Size <= 0 {
		c.Size = 1024
	}
	if c.Batch <= 0 {
		c.Batch = 64
	}
	c.Batch = min(c.Batch, c.Size, MaxCQBatch)
	if c.Spin < 0 {
		c.Spin = 0
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 250 * time.Millisecond
	}
	if c.AckEvery <= 0 {
		c.AckEvery = 32
	}
}

// CQStats are a CQ's counters.
type CQStats struct {
	Polls       uint64 // ibv_poll_cq calls (one cgo crossing each)
	EmptyPolls  uint64 // polls that found nothing
	Completions uint64 // completions polled (counted before delivery)
	Events      uint64 // completion-channel wakeups
	Arms        uint64 // ibv_req_notify_cq calls
	Timeouts    uint64 // safety-net wakeups (IdleTimeout) with no event
	Stray       uint64 // completions whose wr_id was not in flight (dropped)
	Errors      uint64 // poll/arm/event errors
	Panics      uint64 // Completers that panicked (recovered)
	External    uint64 // completions delivered by TryProgress callers
	Parks       uint64 // sleeps without arming while Hold callers poll
	InFlight    int    // work requests posted and not yet completed
	BusyPoll    bool
	Manual      bool
}

type cqCounters struct {
	polls, empty, completions, events, arms, timeouts, stray, errors, panics atomic.Uint64
	extDelivered, parks                                                      atomic.Uint64
}

// CQ is a completion queue and the goroutine that drains it.
type CQ struct {
	d     *Device
	cfg   CQConfig
	v     *verbs.CQ
	ch    *verbs.CompChannel // nil in busy-poll mode
	f     *os.File           // a dup of the channel's fd, in the netpoller
	rc    syscall.RawConn
	slots *slotTable

	// guarded by d.mu
	closed bool
	qps    int

	stopMu  sync.Mutex
	stopped bool
	stop    atomic.Bool
	stopCh  chan struct{} // closed by Close (wakes a parked goroutine)
	wakeCh  chan struct{} // wakes a parked goroutine (capacity 1)
	holds   atomic.Int32  // Hold callers
	oneP    bool          // GOMAXPROCS was 1 at NewCQ (see yield)
	exited  chan struct{}

	// Whoever polls holds progressMu (the run goroutine, Progress and
	// TryProgress callers take turns); it guards wc, recs and oks.
	progressMu sync.Mutex
	wc         []verbs.WC
	recs       []slotRec
	oks        []bool

	// owned by the run goroutine (Close reads them after it exits)
	unacked int
	armed   bool

	st cqCounters
}

// NewCQ creates a completion queue and starts its goroutine.
func (d *Device) NewCQ(cfg CQConfig) (_ *CQ, err error) {
	cfg.defaults()
	if cfg.Manual && cfg.BusyPoll {
		return nil, fmt.Errorf("%w: CQConfig.Manual with BusyPoll", ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if cfg.Size > d.attr.MaxCQE && d.attr.MaxCQE > 0 {
		return nil, fmt.Errorf("%w: CQ size %d > device max %d", ErrInvalid, cfg.Size, d.attr.MaxCQE)
	}
	c := &CQ{
		d: d, cfg: cfg, exited: make(chan struct{}), stopCh: make(chan struct{}), wakeCh: make(chan struct{}, 1),
		oneP: runtime.GOMAXPROCS(0) == 1,
		wc:   make([]verbs.WC, cfg.Batch), recs: make([]slotRec, cfg.Batch), oks: make([]bool, cfg.Batch),
	}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if !cfg.BusyPoll && !cfg.Manual {
		if c.ch, err = d.ctx.CreateCompChannel(); err != nil {
			return nil, err
		}
		if err = c.pollable(); err != nil {
			return nil, err
		}
	}
	if c.v, err = d.ctx.CreateCQ(cfg.Size, c.ch, cfg.Vector, cfg.Batch); err != nil {
		return nil, err
	}
	c.slots = newSlotTable(cfg.Size)
	d.addLocked(c)
	d.counts.CQs++
	if cfg.Manual {
		close(c.exited)
	} else {
		go c.run()
	}
	return c, nil
}

// pollable makes the channel fd non-blocking and registers a dup of it
// with the Go netpoller. The dup shares the open file description, so
// ibv_get_cq_event on the original fd sees O_NONBLOCK (EAGAIN when empty)
// and epoll on the dup reports the original's events.
func (c *CQ) pollable() error {
	fd := c.ch.FD()
	if err := unix.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("rdma: comp channel O_NONBLOCK: %w", err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return fmt.Errorf("rdma: dup comp channel fd: %w", err)
	}
	c.f = os.NewFile(uintptr(dup), "rdma-comp-channel")
	if err := c.f.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("rdma: comp channel fd is not pollable: %w", err)
	}
	if c.rc, err = c.f.SyscallConn(); err != nil {
		return fmt.Errorf("rdma: comp channel fd: %w", err)
	}
	return nil
}

// release frees what NewCQ created (on failure, or after Close stopped the
// goroutine): CQ, then the fd, then the channel.
func (c *CQ) release() error {
	var errs []error
	if c.v != nil {
		c.v.Ack(c.unacked) // ibv_destroy_cq waits for every event to be acked
		c.unacked = 0
		if err := c.v.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.f != nil {
		_ = c.f.Close()
	}
	if c.ch != nil {
		if err := c.ch.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Device is the CQ's device.
func (c *CQ) Device() *Device { return c.d }

// Stats returns the CQ's counters.
func (c *CQ) Stats() CQStats {
	return CQStats{
		Polls: c.st.polls.Load(), EmptyPolls: c.st.empty.Load(), Completions: c.st.completions.Load(),
		Events: c.st.events.Load(), Arms: c.st.arms.Load(), Timeouts: c.st.timeouts.Load(),
		Stray: c.st.stray.Load(), Errors: c.st.errors.Load(), Panics: c.st.panics.Load(),
		External: c.st.extDelivered.Load(), Parks: c.st.parks.Load(),
		InFlight: c.slots.inUse(), BusyPoll: c.cfg.BusyPoll, Manual: c.cfg.Manual,
	}
}

// Progress polls one batch of completions and delivers them on the calling
// goroutine; it returns how many. Only for a Manual CQ (0 otherwise). Safe
// for concurrent use: callers take turns.
func (c *CQ) Progress() int {
	if !c.cfg.Manual {
		return 0
	}
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	if c.stop.Load() {
		return 0
	}
	return c.poll()
}

// TryProgress polls one batch of completions and delivers them on the
// calling goroutine, in any mode, unless another goroutine is polling the
// CQ at that moment (it then returns 0, false at once). It returns how
// many it delivered, and whether it polled. A goroutine that waits for its own completion calls it in its
// wait loop (a Binding's Put does), so that the completion is taken by the
// waiter itself, without a goroutine switch; the CQ's goroutine, if any,
// still delivers whatever it polls first.
func (c *CQ) TryProgress() (int, bool) {
	if !c.progressMu.TryLock() {
		return 0, false
	}
	defer c.progressMu.Unlock()
	if c.stop.Load() {
		return 0, true
	}
	n := c.poll()
	if n > 0 {
		c.st.extDelivered.Add(uint64(n))
	}
	return n, true
}

// Hold declares that the caller will take the completions of what it
// posts itself, with TryProgress, until it calls Release (a Binding's Put
// holds from its post until its completion). While any caller holds, the
// CQ's goroutine neither arms the CQ nor sleeps on its completion channel:
// it parks, so the completions the holders take wake no thread. Whatever
// a holder polls is delivered, its own completions or not. Every Hold needs
// its Release; a holder must not block waiting for a completion it does not
// poll for (release first). Without a goroutine (Manual, BusyPoll) Hold
// changes nothing.
func (c *CQ) Hold() { c.holds.Add(1) }

// Release ends a Hold. The last holder to release wakes the goroutine when
// work requests are still in flight, so that it takes them over.
func (c *CQ) Release() {
	switch h := c.holds.Add(-1); {
	case h < 0:
		panic("rdma: CQ.Release without Hold")
	case h == 0 && c.slots.inUse() > 0:
		c.wake()
	}
}

// posted is called after work requests were posted: with no holder, a
// parked goroutine must wake to take their completions.
func (c *CQ) posted() {
	if c.holds.Load() == 0 {
		c.wake()
	}
}

func (c *CQ) wake() {
	select {
	case c.wakeCh <- struct{}{}:
	default:
	}
}

// Close stops the CQ's goroutine and destroys the CQ and its channel. It
// fails with ErrBusy while QPs use the CQ. A second Close returns nil.
func (c *CQ) Close() error { return c.close(false) }

func (c *CQ) closeForDevice() error { return c.close(true) }

func (c *CQ) close(force bool) error {
	d := c.d
	d.mu.Lock()
	if c.closed {
		d.mu.Unlock()
		return nil
	}
	if c.qps > 0 && !force {
		n := c.qps
		d.mu.Unlock()
		return fmt.Errorf("%w: CQ has %d QPs", ErrBusy, n)
	}
	c.closed = true
	d.mu.Unlock()

	c.stopMu.Lock()
	c.stopped = true
	c.stop.Store(true)
	close(c.stopCh)
	if c.f != nil {
		_ = c.f.SetReadDeadline(time.Unix(1, 0)) // wake the goroutine
	}
	c.stopMu.Unlock()
	<-c.exited
	c.progressMu.Lock() // a Manual CQ: wait out a Progress in flight
	err := c.release()
	c.progressMu.Unlock()

	d.mu.Lock()
	d.removeLocked(c)
	d.counts.CQs--
	d.mu.Unlock()
	return err
}

// run is the CQ's goroutine: drain, then (event mode) arm, poll once more,
// and sleep on the channel fd in the netpoller.
func (c *CQ) run() {
	defer close(c.exited)
	var last time.Time
	for !c.stop.Load() {
		c.progressMu.Lock()
		n := c.poll()
		c.progressMu.Unlock()
		if n > 0 {
			if c.cfg.Spin > 0 {
				last = time.Now()
			}
			continue
		}
		if c.cfg.BusyPoll {
			c.yield()
			continue
		}
		if c.cfg.Spin > 0 && time.Since(last) < c.cfg.Spin {
			c.yield()
			continue
		}
		if c.holds.Load() > 0 {
			c.park()
			continue
		}
		if !c.armed {
			if err := c.v.ReqNotify(false); err != nil {
				c.st.errors.Add(1)
				time.Sleep(time.Millisecond)
				continue
			}
			c.armed = true
			c.st.arms.Add(1)
			continue // poll again: a completion may have landed before the arm
		}
		c.wait()
	}
}

// yield lets other goroutines run between the polls of a spinning
// goroutine, when the process has a single P. With more, they run on the
// others, and a yield would only wake an idle P's thread to spin
// (runtime.Gosched wakes one): a core taken from the callers, the peer or
// the NIC's software. (Async preemption still bounds a spinning
// goroutine's turn.)
func (c *CQ) yield() {
	if c.oneP {
		runtime.Gosched()
	}
}

// park sleeps while callers hold the CQ (see Hold): until the last one
// releases with work requests in flight, a work request is posted with
// no holder, Close, or the safety-net timeout. The CQ is not armed, so
// the completions the holders take raise no events; if it was armed
// before, the one event that may still come wakes nobody (it is read
// with the next wait).
func (c *CQ) park() {
	c.st.parks.Add(1)
	if c.holds.Load() == 0 { // released meanwhile
		return
	}
	t := time.NewTimer(c.cfg.IdleTimeout)
	select {
	case <-c.wakeCh:
	case <-c.stopCh:
	case <-t.C:
		c.st.timeouts.Add(1)
	}
	t.Stop()
}

// wait sleeps until the channel has an event (consumed here), the
// safety-net timeout passes, or Close.
func (c *CQ) wait() {
	c.stopMu.Lock()
	if c.stopped {
		c.stopMu.Unlock()
		return
	}
	_ = c.f.SetReadDeadline(time.Now().Add(c.cfg.IdleTimeout))
	c.stopMu.Unlock()

	var got bool
	var evErr error
	err := c.rc.Read(func(uintptr) bool {
		_, e := c.ch.GetCQEvent()
		if errors.Is(e, syscall.EAGAIN) {
			return false // nothing yet: park in the netpoller
		}
		got, evErr = e == nil, e
		return true
	})
	switch {
	case got:
		c.armed = false
		c.st.events.Add(1)
		c.unacked++
		if c.unacked >= c.cfg.AckEvery {
			c.v.Ack(c.unacked)
			c.unacked = 0
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.st.timeouts.Add(1)
	default: // unexpected (evErr or err): re-arm (harmless if still armed) and go on
		_ = evErr
		c.armed = false
		c.st.errors.Add(1)
		time.Sleep(time.Millisecond)
	}
}

// poll drains up to Batch completions with one cgo call and dispatches
// them. The caller holds progressMu.
func (c *CQ) poll() int {
	n, err := c.v.Poll(c.wc)
	c.st.polls.Add(1)
	if err != nil {
		c.st.errors.Add(1)
		return 0
	}
	if n == 0 {
		c.st.empty.Add(1)
		return 0
	}
	c.st.completions.Add(uint64(n)) // before delivery: a Completer's caller sees it counted
	c.slots.mu.Lock()
	for i := 0; i < n; i++ {
		c.recs[i], c.oks[i] = c.slots.takeLocked(c.wc[i].ID)
	}
	c.slots.mu.Unlock()
	for i := 0; i < n; i++ {
		if !c.oks[i] {
			c.st.stray.Add(1)
			continue
		}
		r, w := c.recs[i], &c.wc[i]
		c.recs[i] = slotRec{}
		comp := Completion{Op: r.op, Status: w.Status, ByteLen: w.ByteLen, QPN: w.QPNum}
		if w.Flags&verbs.WCWithImm != 0 {
			comp.Imm, comp.HasImm = w.Imm, true
		}
		if w.Status != verbs.WCSuccess {
			comp.Err = &CompletionError{Op: r.op, Status: w.Status, VendorErr: w.VendorErr, QPN: w.QPNum}
		}
		c.deliver(r, comp)
	}
	return n
}

// deliver frees the work request's queue entry, calls the Completer (which
// may post again at once), then counts the request done (so QP.Close
// returns only after every Completer ran).
func (c *CQ) deliver(r slotRec, comp Completion) {
	r.qp.retire(r.op)
	if r.done != nil {
		func() {
			defer func() {
				if recover() != nil {
					c.st.panics.Add(1)
				}
			}()
			r.done.Complete(comp)
		}()
	}
	r.qp.finished()
}
