package hlsim

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// CS flags the emulator does not model (each is a CS "type" of its own or
// a submission mode).
const (
	csFlagsCollectiveWait   = 0x8
	csFlagsStaged           = 0x40 // HL_CS_FLAGS_STAGED_SUBMISSION; FIRST (0x80) and LAST (0x100) mean nothing without it
	csFlagsEncapSignals     = 0x800
	csFlagsReserveSignals   = 0x1000
	csFlagsUnreserveSignals = 0x2000
	csFlagsEngineCoreCmd    = 0x4000
	csFlagsFlushPCIHBW      = 0x8000
	csFlagsEnginesCmd       = 0x10000

	csTypeFlags = hlsys.CSFlagsSignal | hlsys.CSFlagsWait | csFlagsCollectiveWait |
		csFlagsReserveSignals | csFlagsUnreserveSignals | csFlagsEngineCoreCmd |
		csFlagsFlushPCIHBW | csFlagsEnginesCmd
)

// WAIT_CS input flags.
const (
	waitFlagsInterrupt = hlsys.WaitCSFlagsInterrupt
	waitFlagsMultiCS   = hlsys.WaitCSFlagsMultiCS

	// waitForever is MAX_SCHEDULE_TIMEOUT: the driver waits without limit.
	waitForever = 1<<63 - 1

	// statusRejected is the internal end status of a CS the driver refused
	// after it got a sequence number (its fence error is -EBUSY, "not
	// submitted"): WAIT_CS reports it COMPLETED.
	statusRejected = 0xFF

	// outcomeHistory is HL_CS_OUTCOME_HISTORY_LEN: the per-context store of
	// ended CSs with CS_FLAGS_TIMESTAMP that WAIT_CS consults for a
	// sequence number whose fence is gone.
	outcomeHistory = 256
)

// outcome is a stored hl_cs_outcome.
type outcome struct {
	seq    uint64
	status uint32 // WAIT_CS status, or statusRejected
	tsNs   int64
}

// cs is one command submission in flight or completed (its fence).
type cs struct {
	seq       uint64
	done      atomic.Bool   // the CS has ended (set after its status)
	jobsLeft  atomic.Int32  // jobs not yet through their engine
	aborting  atomic.Bool   // reset / close: engines drop its remaining work
	faulted   atomic.Bool   // a job failed in its engine
	delay     time.Duration // DelayNextCS
	timestamp bool          // CS_FLAGS_TIMESTAMP
	skipReset bool          // CS_FLAGS_SKIP_RESET_ON_TIMEOUT
	// accepted: counted in Stats.CSSubmitted (set under csMu). A CS
	// refused after it took a sequence number is not, nor is its end,
	// should a reset end it before reject does.
	accepted bool

	timeout  time.Duration // the TDR's (default or custom), from when it is armed
	tdrArmed bool          // its TDR runs (hctx.tdrMu; tdr.go)
	tdrDue   time.Duration // its TDR's deadline on Device.clock, once armed

	mu       sync.Mutex
	ended    bool // the CS was released (its jobs done or rolled back)
	timedout bool // its TDR fired and made it count as timed out (not with SKIP_RESET)
	// forced: its fence was completed with -EIO by force_complete_cs
	// (the release watchdog armed) while the CS stays in flight; its
	// later end changes neither its status nor the counters.
	forced bool
	status uint32 // WAIT_CS status once ended
	doneNs int64  // CLOCK_MONOTONIC completion time
	delayT *time.Timer
	held   []*job        // jobs of a hung CS: they keep their CBs in use until it ends
	wake   chan struct{} // made by the first blocking WAIT_CS, closed as the CS ends

	// The job of a one-chunk CS, and its list: one allocation for the
	// common CS.
	job0  job
	jobs0 [1]*job
}

func (s *cs) isDone() bool { return s.done.Load() }

// endCh returns a channel closed once the CS has ended (made on demand:
// most WAIT_CS calls poll with a timeout of 0 and need none).
func (s *cs) endCh() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wake == nil {
		s.wake = make(chan struct{})
		if s.done.Load() {
			close(s.wake)
		}
	}
	return s.wake
}

// markDone publishes the end of the CS (its status set) and wakes its
// blocked waiters.
func (s *cs) markDone() {
	s.mu.Lock()
	s.done.Store(true)
	if s.wake != nil {
		close(s.wake)
	}
	s.mu.Unlock()
}

// job is one chunk of a CS, run by its queue's engine.
type job struct {
	cs    *cs
	cb    []byte // Gaudi1: the CB as parsed at submission (the driver's patched CB)
	kcb   *cbuf  // Gaudi1: the kernel CB (usage count)
	va    uint64 // Gaudi2: device VA of the user CB, fetched through the MMU at execution
	size  uint32
	queue uint32
}

// csIoctl serves HL_IOCTL_CS in the order of hl_cs_ioctl: the sanity
// checks (no sequence number consumed), the chunk array copy, the
// sequence number (EAGAIN while its completion slot is busy), then the
// per-chunk validation and parsing: a CS refused from there on has
// consumed its sequence number, whose fence completes at once (WAIT_CS on
// it reports COMPLETED, as the driver's -EBUSY fence error does), and the
// output holds seq ULLONG_MAX and the negative errno as status, as
// hl_cs_ioctl writes it.
func (c *hctx) csIoctl(a *hlsys.CSArgs) error {
	in := a.In
	flags := in.CSFlags
	fail := func(e unix.Errno) error {
		if e != unix.EAGAIN {
			*a = hlsys.CSArgs{}
			*a.Out() = hlsys.CSOut{Seq: ^uint64(0), Status: uint32(-int32(e))}
		}
		return e
	}
	switch {
	case in.Pad != 0:
		return fail(unix.EINVAL)
	case !c.d.operational():
		return fail(unix.EBUSY)
	case flags&csFlagsStaged != 0 && c.d.amap.gaudi2 && !c.d.amap.gaudi3:
		// hl_cs_sanity_checks: gaudi2_sw_init does not set
		// supports_staged_submission ("staged submission not supported").
		c.log.Debug().Msg("CS: staged submission not supported")
		return fail(unix.EPERM)
	case popcount(flags&csTypeFlags) > 1:
		c.log.Debug().Uint32("flags", flags).Msg("CS: type flags are mutually exclusive")
		return fail(unix.EINVAL)
	case flags&(csTypeFlags|csFlagsStaged|csFlagsEncapSignals) != 0:
		c.log.Debug().Uint32("flags", flags).Msg("CS: signal/wait, staged and engine CSs are not emulated")
		return fail(unix.EOPNOTSUPP)
	case in.NumChunksExecute == 0:
		c.log.Debug().Msg("CS: execute CS with 0 chunks")
		return fail(unix.EINVAL)
	case in.NumChunksRestore != 0 && (flags&hlsys.CSFlagsForceRestore != 0 || c.d.amap.gaudi3):
		// hl_cs_ctx_switch runs the restore chunks only with FORCE_RESTORE
		// or a context-switch token; gaudi_sw_init and gaudi2_sw_init do
		// not set supports_ctx_switch, so on Gaudi1/2 restore chunks
		// without FORCE_RESTORE are never read. Gaudi3's sw_init was not
		// read. The restore phase is not emulated.
		c.log.Debug().Msg("CS: restore chunks (context switch) are not emulated")
		return fail(unix.EOPNOTSUPP)
	case in.NumChunksExecute > hlsys.MaxJobsPerCS:
		c.log.Debug().Uint32("chunks", in.NumChunksExecute).Msg("CS: more than 512 chunks")
		return fail(unix.EINVAL)
	}
	var few [4]hlsys.CSChunk // the chunk array of a small CS stays on the stack
	chunks := few[:0]
	if in.NumChunksExecute <= uint32(len(few)) {
		chunks = few[:in.NumChunksExecute]
	} else {
		chunks = make([]hlsys.CSChunk, in.NumChunksExecute)
	}
	if err := readStruct(unsafe.Pointer(&chunks[0]), uintptr(len(chunks))*unsafe.Sizeof(chunks[0]), in.ChunksExecute); err != nil {
		return fail(unix.EFAULT)
	}
	timeout := c.d.cfg.CSTimeout
	if flags&hlsys.CSFlagsCustomTimeout != 0 {
		// hl_cs_ioctl: msecs_to_jiffies(args->in.timeout * 1000), a u32
		// product that wraps above 4294967 s.
		timeout = time.Duration(in.Timeout*1000) * time.Millisecond
	}

	s := &cs{
		timestamp: flags&hlsys.CSFlagsTimestamp != 0,
		skipReset: flags&hlsys.CSFlagsSkipResetOnTimeout != 0,
	}
	c.csMu.Lock()
	if c.closed {
		c.csMu.Unlock()
		if err := c.usable(); err != nil {
			return err
		}
		return unix.ENODEV
	}
	// allocate_cs: the completion slot of the next sequence number.
	slot := c.nextSeq & uint64(len(c.slots)-1)
	old := c.slots[slot]
	if old != nil && !old.isDone() {
		c.csMu.Unlock()
		return fail(unix.EAGAIN)
	}
	s.seq = c.nextSeq
	c.nextSeq++
	c.slots[slot] = s

	jobs, err := c.buildJobs(s, chunks)
	if err == nil && c.d.beforeSchedule != nil {
		c.d.beforeSchedule()
	}
	switch {
	case err == unix.EOPNOTSUPP:
		// An emulator limitation, not a driver refusal: undo the sequence
		// number so the CS leaves no trace.
		c.nextSeq--
		c.slots[slot] = old
		c.csMu.Unlock()
		return fail(unix.EOPNOTSUPP)
	case err == nil && !c.d.operational():
		// hl_hw_queue_schedule_cs: "device is %s, CS rejected!".
		err = unix.EPERM
	}
	if err != nil {
		c.csMu.Unlock()
		c.reject(s)
		return fail(errnoOf(err).(unix.Errno))
	}
	hang, abort, delay := c.d.injected()
	s.delay = delay
	s.accepted = true
	c.d.st.submitted.Add(1)
	if hang {
		for _, j := range jobs {
			if j.kcb != nil {
				j.kcb.inUse.Add(1)
			}
		}
		s.mu.Lock()
		s.held = jobs
		s.mu.Unlock()
	}
	// On the mirror list before its jobs can end it (and after held is
	// set: a TDR of 0 fires at once).
	s.timeout = timeout
	c.scheduleTDR(s)
	woke := false // a parked engine was woken
	if !hang && !abort {
		s.jobsLeft.Store(int32(len(jobs)))
		for _, j := range jobs {
			j.cs = s
			if j.kcb != nil {
				j.kcb.inUse.Add(1)
			}
			woke = c.engineFor(j.queue).push(j) || woke
		}
	}
	c.csMu.Unlock()
	if woke {
		// A queue manager starts on the doorbell. The woken engine's
		// goroutine was made runnable on this goroutine's core, where it
		// would wait for this caller to block or for another core to
		// steal it (tens of microseconds measured: the caller goes on
		// building its next CS): let it run now; the caller resumes on
		// whichever core is free.
		runtime.Gosched()
	}

	if abort {
		c.finish(s, hlsys.WaitCSStatusAborted)
	}
	*a = hlsys.CSArgs{} // the driver clears the args before filling the output
	*a.Out() = hlsys.CSOut{Seq: s.seq, Status: hlsys.CSStatusSuccess}
	return nil
}

// reject ends a CS the driver refused after giving it a sequence number:
// its fence completes with the driver's "not submitted" error.
// A reset racing with the ioctl may have ended it already (it holds a
// slot from the moment csMu was released): then that is its outcome.
func (c *hctx) reject(s *cs) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.status = statusRejected
	s.mu.Unlock()
	if s.timestamp {
		c.recordOutcome(outcome{seq: s.seq, status: statusRejected})
	}
	s.markDone()
}

// engineFor returns the engine of queue q, starting it on first use
// (csMu held, context not closed).
func (c *hctx) engineFor(q uint32) *engine {
	e := c.engines[q]
	if e == nil {
		e = newEngine(c, int(q))
		c.engines[q] = e
		c.engWG.Add(1)
		go e.run()
	}
	return e
}

// buildJobs validates the chunks the way cs_ioctl_default does for each
// (validate_queue_index, get_cb_from_cs_chunk, the ASIC's cs_parser), then
// refuses a CS of internal queues only, and builds the jobs. It returns a
// bare unix.Errno; EOPNOTSUPP marks a CS the driver would take on a queue
// the emulator does not model.
func (c *hctx) buildJobs(s *cs, chunks []hlsys.CSChunk) ([]*job, error) {
	var jobs []*job
	if len(chunks) == 1 {
		jobs = s.jobs0[:]
	} else {
		jobs = make([]*job, len(chunks))
	}
	a := &c.d.amap
	if !a.gaudi2 {
		c.memMu.RLock()
		defer c.memMu.RUnlock()
		if c.memDead {
			return nil, unix.ENODEV
		}
	}
	external, other := false, false
	for i := range chunks {
		ch := &chunks[i]
		q := ch.QueueIndex
		kind := a.queueKindOf(q)
		switch kind {
		case qInvalid:
			c.log.Debug().Uint32("queue", q).Msg("CS: queue index is invalid")
			return nil, unix.EINVAL
		case qDriverOnly:
			c.log.Debug().Uint32("queue", q).Msg("CS: queue is restricted for the kernel driver")
			return nil, unix.EINVAL
		}
		var j *job
		if len(chunks) == 1 {
			j = &s.job0
		} else {
			j = new(job)
		}
		j.size, j.queue = ch.CBSize, q
		if a.gaudi2 {
			// Every Gaudi2 queue is QUEUE_TYPE_HW with CB_ALLOC_USER: the
			// chunk must say USER_ALLOC_CB and carry a CB address; the
			// parser checks the queue is enabled, then the address range.
			// cb_size is not checked (user CBs are not bound by
			// HL_MAX_CB_SIZE).
			if ch.Flags&hlsys.CSChunkFlagsUserAllocCB == 0 {
				c.log.Debug().Uint32("queue", q).Msg("CS: queue doesn't support kernel CB")
				return nil, unix.EINVAL
			}
			if kind == qDisabled {
				c.log.Debug().Uint32("queue", q).Msg("CS: h/w queue is disabled")
				return nil, unix.EINVAL
			}
			if !a.cbAddressValid(ch.CBHandle, uint64(ch.CBSize)) {
				c.log.Debug().Uint64("cb", ch.CBHandle).Uint32("size", ch.CBSize).Msg("CS: CB address for internal QMAN is not valid")
				return nil, unix.EFAULT
			}
			j.va = ch.CBHandle
			external = true
			other = other || kind == qOther
			jobs[i] = j
			continue
		}
		if kind == qOther {
			// Gaudi1 internal queue: USER_ALLOC_CB is "don't care", the CB
			// is a device address checked against SRAM, DRAM and PMMU.
			if !a.cbAddressValid(ch.CBHandle, uint64(ch.CBSize)) {
				c.log.Debug().Uint64("cb", ch.CBHandle).Msg("CS: CB address for internal QMAN is not valid")
				return nil, unix.EFAULT
			}
			other = true
			jobs[i] = j
			continue
		}
		// Gaudi1 external queue: a kernel CB handle whatever the chunk
		// flags say, 8 <= cb_size <= the CB's size, parsed now.
		cb := c.lookupCB(ch.CBHandle)
		if cb == nil || ch.CBSize < 8 || ch.CBSize > cb.size {
			c.log.Debug().Uint64("cb", ch.CBHandle).Uint32("size", ch.CBSize).Msg("CS: CB handle invalid or CB size invalid")
			return nil, unix.EINVAL
		}
		bytes := append([]byte(nil), cb.mem[:ch.CBSize]...)
		if err := gaudi1Parse(bytes); err != nil {
			c.log.Debug().Err(err).Msg("CS: CB rejected by the parser")
			return nil, parseErrno(err)
		}
		j.cb, j.kcb = bytes, cb
		external = true
		jobs[i] = j
	}
	if !external {
		c.log.Debug().Msg("CS: contains only internal queues jobs and needs completion")
		return nil, unix.EINVAL
	}
	if other {
		c.log.Debug().Msg("CS: a queue the driver takes but the emulator does not model")
		return nil, unix.EOPNOTSUPP
	}
	return jobs, nil
}

// jobDone is called by an engine when a job has run (or was dropped).
func (c *hctx) jobDone(j *job, failed bool) {
	// The ended CS stays in its completion slot until the slot is reused
	// (16K slots on Gaudi1): it must not keep the parsed CB copy alive.
	j.cb = nil
	if j.kcb != nil {
		j.kcb.inUse.Add(-1)
	}
	s := j.cs
	if failed {
		s.faulted.Store(true)
	}
	if s.jobsLeft.Add(-1) != 0 {
		return
	}
	if s.aborting.Load() {
		// abortAll ends it once every aborted CS has drained.
		c.drainMu.Lock()
		c.drainCond.Broadcast()
		c.drainMu.Unlock()
		return
	}
	switch {
	case s.faulted.Load():
		c.finish(s, hlsys.WaitCSStatusAborted)
	case s.delay > 0:
		s.mu.Lock()
		if !s.ended {
			s.delayT = time.AfterFunc(s.delay, func() {
				if c.enterBG() {
					defer c.exitBG()
					c.finish(s, hlsys.WaitCSStatusCompleted)
				}
			})
		}
		s.mu.Unlock()
	default:
		c.finish(s, hlsys.WaitCSStatusCompleted)
	}
}

func (s *cs) abortStatus() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timedout {
		return hlsys.WaitCSStatusTimedOut
	}
	return hlsys.WaitCSStatusAborted
}

// finish ends s with status (once) and wakes its waiters.
func (c *hctx) finish(s *cs, status uint32) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	forced := s.forced
	switch {
	case forced:
		// The fence completed already: its status stays (WAIT_CS reads it
		// without the lock once done).
		status = s.status
	case s.timedout:
		// cs_do_release: a CS marked timed out ends -ETIMEDOUT, also
		// when the hardware finishes it after its TDR (reset_on_lockup=0).
		status = hlsys.WaitCSStatusTimedOut
	}
	if !forced {
		s.status = status
	}
	var o outcome // what the outcome store keeps (CS_FLAGS_TIMESTAMP)
	if s.timestamp {
		s.doneNs = c.d.ktime()
		o = outcome{seq: s.seq, status: status}
		if status == hlsys.WaitCSStatusCompleted {
			o.tsNs = s.doneNs
		}
	}
	timedout := s.timedout
	if s.delayT != nil {
		s.delayT.Stop()
	}
	for _, j := range s.held {
		if j.kcb != nil {
			j.kcb.inUse.Add(-1)
		}
	}
	s.held = nil
	s.mu.Unlock()
	c.releaseTDR(s, timedout)
	if forced {
		// Counted and woken when the fence was forced; what the store
		// would keep cannot be waited for any more (WAIT_CS is EBUSY
		// until the context is gone).
		return
	}
	if s.timestamp {
		c.recordOutcome(o)
	}
	switch {
	case !s.accepted:
	case status == hlsys.WaitCSStatusCompleted:
		c.d.st.completed.Add(1)
	case status == hlsys.WaitCSStatusTimedOut:
		c.d.st.timedout.Add(1)
	default:
		c.d.st.aborted.Add(1)
	}
	s.markDone()
}

// recordOutcome stores the outcome of an ended CS that had
// CS_FLAGS_TIMESTAMP (hl_push_cs_outcome from cs_do_release, before the
// fence completes): when the store is full the oldest outcome is lost.
func (c *hctx) recordOutcome(o outcome) {
	c.outMu.Lock()
	if c.outcomes == nil {
		c.outcomes = new(outcomeStore) // 6 KiB, out of the context's hot fields
	}
	c.outcomes.push(o)
	c.outMu.Unlock()
}

// outcomeStore holds up to outcomeHistory outcomes, oldest first, in a
// ring: a push into a full store drops the oldest (in O(1): every CS
// with CS_FLAGS_TIMESTAMP pushes); a pop takes one out from anywhere.
type outcomeStore struct {
	ring    [outcomeHistory]outcome
	head, n int
}

func (s *outcomeStore) at(i int) *outcome { return &s.ring[(s.head+i)%outcomeHistory] }

func (s *outcomeStore) push(o outcome) {
	if s.n == outcomeHistory {
		s.head = (s.head + 1) % outcomeHistory
		s.n--
	}
	*s.at(s.n) = o
	s.n++
}

func (s *outcomeStore) pop(seq uint64) (outcome, bool) {
	if s == nil {
		return outcome{}, false
	}
	for i := range s.n {
		if o := *s.at(i); o.seq == seq {
			for j := i; j < s.n-1; j++ {
				*s.at(j) = *s.at(j + 1)
			}
			s.n--
			return o, true
		}
	}
	return outcome{}, false
}

// popOutcome removes and returns the stored outcome of seq
// (hl_pop_cs_outcome).
func (c *hctx) popOutcome(seq uint64) (outcome, bool) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	return c.outcomes.pop(seq)
}

// waitIoctl serves HL_IOCTL_WAIT_CS in the order of hl_wait_ioctl: EBUSY
// while the device is not operational or the release watchdog runs (for
// every form and sequence number, completed ones too), then the interrupt
// and multi-CS forms, then one sequence number (hl_cs_wait_ioctl).
func (c *hctx) waitIoctl(a *hlsys.WaitCSArgs) error {
	in := a.In
	out := a.Out()
	if !c.d.operational() || c.d.wdActive.Load() {
		return unix.EBUSY
	}
	if in.Flags&waitFlagsInterrupt != 0 {
		if c.d.amap.gaudi3 {
			return c.interruptWait(a)
		}
		if !c.d.amap.gaudi2 {
			return unix.EPERM // Gaudi has no user interrupts
		}
		return unix.EOPNOTSUPP
	}
	if in.Flags&waitFlagsMultiCS != 0 {
		if in.InterruptTimeoutUs>>8 != 0 {
			// hl_multi_cs_wait_ioctl: the pad bytes after seq_arr_len
			// (a union with interrupt_timeout_us) must be 0, checked first.
			return unix.EINVAL
		}
		if c.d.amap.gaudi2 {
			return unix.EPERM // supports_wait_for_multi_cs is false on Gaudi2
		}
		return unix.EOPNOTSUPP
	}
	seq := in.Seq
	*a = hlsys.WaitCSArgs{} // the driver clears the args before filling the output

	// hl_ctx_get_fence: EINVAL beyond the last sequence number, no fence
	// (gone) below the window of completion slots, else the slot's fence,
	// which is NULL for a slot never used (sequence number 0).
	c.csMu.Lock()
	if seq >= c.nextSeq {
		c.csMu.Unlock()
		c.log.Debug().Uint64("seq", seq).Msg("WAIT_CS: sequence number never submitted")
		return unix.EINVAL
	}
	var s *cs
	if seq+uint64(len(c.slots)) >= c.nextSeq {
		if f := c.slots[seq&uint64(len(c.slots)-1)]; f != nil && f.seq == seq {
			s = f
		}
	}
	c.csMu.Unlock()

	if s == nil {
		// The fence is gone: the outcome store may still know it.
		o, ok := c.popOutcome(seq)
		if !ok {
			out.Status = hlsys.WaitCSStatusCompleted
			out.Flags = hlsys.WaitCSStatusFlagGone
			return nil
		}
		return reportEnd(out, o.status, o.tsNs)
	}

	if !s.isDone() {
		if in.TimeoutUs == 0 {
			out.Status = hlsys.WaitCSStatusBusy
			return nil
		}
		c.waiting.Add(1)
		defer c.waiting.Add(-1)
		if in.TimeoutUs == waitForever {
			<-s.endCh()
		} else {
			// usecs_to_jiffies takes an unsigned int: larger values wrap.
			t := time.NewTimer(time.Duration(uint32(in.TimeoutUs)) * time.Microsecond)
			select {
			case <-s.endCh():
				t.Stop()
			case <-t.C:
				if !s.isDone() {
					out.Status = hlsys.WaitCSStatusBusy
					return nil
				}
			}
		}
	}
	var ts int64
	if s.timestamp && s.status == hlsys.WaitCSStatusCompleted {
		ts = s.doneNs
	}
	return reportEnd(out, s.status, ts)
}

// reportEnd fills the WAIT_CS output for an ended CS the way
// hl_wait_for_fence and hl_cs_wait_ioctl do: -ETIMEDOUT and -EIO fence
// errors fail the ioctl with TIMEDOUT / ABORTED; anything else (success,
// or a CS refused after its sequence number was given) is COMPLETED, with
// TIMESTAMP_VLD when a completion time was recorded.
func reportEnd(out *hlsys.WaitCSOut, status uint32, tsNs int64) error {
	switch status {
	case hlsys.WaitCSStatusTimedOut:
		out.Status = hlsys.WaitCSStatusTimedOut
		return unix.ETIMEDOUT
	case hlsys.WaitCSStatusAborted:
		out.Status = hlsys.WaitCSStatusAborted
		return unix.EIO
	}
	out.Status = hlsys.WaitCSStatusCompleted
	if tsNs != 0 {
		out.Flags |= hlsys.WaitCSStatusFlagTimestampVld
		out.TimestampNsec = tsNs
	}
	return nil
}

func popcount(x uint32) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}
