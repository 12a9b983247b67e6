package hlsim

import (
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
	csFlagsStaged           = 0x40 | 0x80 | 0x100
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
	waitFlagsInterrupt         = hlsys.WaitCSFlagsInterrupt
	waitFlagsMultiCS           = hlsys.WaitCSFlagsMultiCS
	waitFlagsInterruptKernelCQ = 0x10
	waitFlagsRegisterInterrupt = 0x20

	// waitForever is MAX_SCHEDULE_TIMEOUT: the driver waits without limit.
	waitForever = 1<<63 - 1
)

// cs is one command submission in flight or completed (its fence).
type cs struct {
	seq       uint64
	done      chan struct{} // closed once the CS has ended
	jobsLeft  atomic.Int32  // jobs not yet through their engine
	aborting  atomic.Bool   // reset / close: engines drop its remaining work
	faulted   atomic.Bool   // a job failed in its engine
	delay     time.Duration // DelayNextCS
	timestamp bool          // CS_FLAGS_TIMESTAMP
	skipReset bool          // CS_FLAGS_SKIP_RESET_ON_TIMEOUT

	mu       sync.Mutex
	ended    bool
	timedout bool
	status   uint32 // WAIT_CS status once ended
	doneNs   int64  // CLOCK_MONOTONIC completion time
	tdr      *time.Timer
	delayT   *time.Timer
	held     []*job // jobs of a hung CS: they keep their CBs in use until it ends
}

func (s *cs) isDone() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// job is one chunk of a CS, run by its queue's engine.
type job struct {
	cs   *cs
	cb   []byte // Gaudi1: the CB as parsed at submission (the driver's patched CB)
	kcb  *cbuf  // Gaudi1: the kernel CB (usage count)
	va   uint64 // Gaudi2: device VA of the user CB, fetched through the MMU at execution
	size uint32
}

// csIoctl serves HL_IOCTL_CS.
func (c *hctx) csIoctl(a *hlsys.CSArgs) error {
	in := a.In
	flags := in.CSFlags
	switch {
	case c.d.status.Load() != hlsys.DeviceStatusOperational:
		return unix.EBUSY
	case in.Pad != 0:
		return unix.EINVAL
	case popcount(flags&csTypeFlags) > 1:
		c.log.Debug().Uint32("flags", flags).Msg("CS: type flags are mutually exclusive")
		return unix.EINVAL
	case flags&(csTypeFlags|csFlagsStaged|csFlagsEncapSignals) != 0:
		c.log.Debug().Uint32("flags", flags).Msg("CS: signal/wait, staged and engine CSs are not emulated")
		return unix.EOPNOTSUPP
	case in.NumChunksRestore != 0:
		c.log.Debug().Msg("CS: restore chunks (context switch) are not emulated")
		return unix.EOPNOTSUPP
	case in.NumChunksExecute == 0 || in.NumChunksExecute > hlsys.MaxJobsPerCS:
		c.log.Debug().Uint32("chunks", in.NumChunksExecute).Msg("CS: number of chunks out of [1, 512]")
		return unix.EINVAL
	}
	chunks := make([]hlsys.CSChunk, in.NumChunksExecute)
	if err := readStruct(unsafe.Pointer(&chunks[0]), uintptr(len(chunks))*unsafe.Sizeof(chunks[0]), in.ChunksExecute); err != nil {
		return unix.EFAULT
	}
	jobs, queues, err := c.buildJobs(chunks)
	if err != nil {
		return err
	}
	timeout := c.d.cfg.CSTimeout
	if flags&hlsys.CSFlagsCustomTimeout != 0 {
		timeout = time.Duration(in.Timeout) * time.Second
	}

	s := &cs{
		done:      make(chan struct{}),
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
	if c.d.status.Load() != hlsys.DeviceStatusOperational {
		c.csMu.Unlock()
		return unix.EBUSY
	}
	slot := c.nextSeq & uint64(len(c.slots)-1)
	if old := c.slots[slot]; old != nil && !old.isDone() {
		c.csMu.Unlock()
		return unix.EAGAIN
	}
	s.seq = c.nextSeq
	c.nextSeq++
	c.slots[slot] = s
	hang, abort, delay := c.d.injected()
	s.delay = delay
	c.d.st.submitted.Add(1)
	s.mu.Lock() // the timer may fire at once (a custom timeout of 0)
	s.tdr = time.AfterFunc(timeout, func() { c.tdrExpired(s) })
	if hang {
		for _, j := range jobs {
			if j.kcb != nil {
				j.kcb.inUse.Add(1)
			}
		}
		s.held = jobs
	}
	s.mu.Unlock()
	if !hang && !abort {
		s.jobsLeft.Store(int32(len(jobs)))
		for i, j := range jobs {
			j.cs = s
			if j.kcb != nil {
				j.kcb.inUse.Add(1)
			}
			c.engines[queues[i]].push(j)
		}
	}
	c.csMu.Unlock()

	if abort {
		c.finish(s, hlsys.WaitCSStatusAborted)
	}
	*a = hlsys.CSArgs{} // the driver clears the args before filling the output
	*a.Out() = hlsys.CSOut{Seq: s.seq, Status: hlsys.CSStatusSuccess}
	return nil
}

// buildJobs validates the chunks like the driver (queue index, CB
// ownership type, CB size; the Gaudi1 parser) and builds the jobs.
func (c *hctx) buildJobs(chunks []hlsys.CSChunk) ([]*job, []int, error) {
	jobs := make([]*job, len(chunks))
	queues := make([]int, len(chunks))
	gaudi2 := c.d.amap.gaudi2
	if !gaudi2 {
		c.memMu.RLock()
		defer c.memMu.RUnlock()
		if c.memDead {
			return nil, nil, unix.ENODEV
		}
	}
	for i := range chunks {
		ch := &chunks[i]
		q := ch.QueueIndex
		if q >= numQueues {
			c.log.Debug().Uint32("queue", q).Msg("CS: queue is not an emulated PCI DMA queue (0-7)")
			return nil, nil, unix.EINVAL
		}
		userCB := ch.Flags&hlsys.CSChunkFlagsUserAllocCB != 0
		if ch.CBSize < 8 || ch.CBSize > hlsys.MaxCBSize || ch.CBSize%8 != 0 {
			c.log.Debug().Uint32("cb_size", ch.CBSize).Msg("CS: CB size must be a multiple of 8 in [8, HL_MAX_CB_SIZE]")
			return nil, nil, unix.EINVAL
		}
		j := &job{size: ch.CBSize}
		if gaudi2 {
			// Every Gaudi2 queue is CB_ALLOC_USER: a device VA, checked
			// to lie in an MMU range; the bytes are fetched at execution.
			if !userCB {
				c.log.Debug().Msg("CS: Gaudi2 queues need USER_ALLOC_CB and a CB device VA")
				return nil, nil, unix.EINVAL
			}
			if !c.d.amap.inMMURange(ch.CBHandle, uint64(ch.CBSize)) {
				c.log.Debug().Uint64("cb", ch.CBHandle).Msg("CS: CB address outside the DMMU/PMMU ranges")
				return nil, nil, unix.EINVAL
			}
			j.va = ch.CBHandle
		} else {
			// Gaudi1 external queues are CB_ALLOC_KERNEL: a kernel CB
			// handle, parsed and copied at submission.
			if userCB {
				c.log.Debug().Msg("CS: Gaudi external queues take kernel CB handles, not USER_ALLOC_CB")
				return nil, nil, unix.EINVAL
			}
			cb := c.lookupCB(ch.CBHandle)
			if cb == nil || ch.CBSize > cb.size {
				c.log.Debug().Uint64("cb", ch.CBHandle).Msg("CS: no such CB, or cb_size larger than the CB")
				return nil, nil, unix.EINVAL
			}
			bytes := append([]byte(nil), cb.mem[:ch.CBSize]...)
			if err := gaudi1Parse(bytes); err != nil {
				c.log.Debug().Err(err).Msg("CS: CB rejected by the parser")
				return nil, nil, parseErrno(err)
			}
			j.cb, j.kcb = bytes, cb
		}
		jobs[i], queues[i] = j, int(q)
	}
	return jobs, queues, nil
}

// jobDone is called by an engine when a job has run (or was dropped).
func (c *hctx) jobDone(j *job, failed bool) {
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
	if s.timedout && status != hlsys.WaitCSStatusCompleted {
		status = hlsys.WaitCSStatusTimedOut
	}
	s.status = status
	s.doneNs = monotonicNow()
	if s.tdr != nil {
		s.tdr.Stop()
	}
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
	switch status {
	case hlsys.WaitCSStatusCompleted:
		c.d.st.completed.Add(1)
	case hlsys.WaitCSStatusTimedOut:
		c.d.st.timedout.Add(1)
	default:
		c.d.st.aborted.Add(1)
	}
	close(s.done)
}

// tdrExpired is the TDR: the CS is still in flight after its timeout.
func (c *hctx) tdrExpired(s *cs) {
	if !c.enterBG() {
		return
	}
	defer c.exitBG()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.timedout = true
	s.mu.Unlock()
	c.log.Warn().Uint64("seq", s.seq).Msg("CS timed out (TDR)")
	c.notify(hlsys.NotifierCSTimeout)
	if !c.d.cfg.NoResetOnLockup && !s.skipReset {
		c.d.reset(c, "CS timeout")
	}
	// Without a reset (or when the context went away meanwhile) the CS
	// ends TIMEDOUT now; an engine still running it carries on, as the
	// hardware would.
	c.finish(s, hlsys.WaitCSStatusTimedOut)
}

// abortAll ends every CS in flight ABORTED (TIMEDOUT if the TDR had
// fired): engines drop the queued jobs and stop a running one at the next
// packet boundary; once all have drained, between runs (a reset makes the
// device operational again there) and only then are the waiters woken.
func (c *hctx) abortAll(between func()) {
	c.csMu.Lock()
	var list []*cs
	for _, s := range c.slots {
		if s != nil && !s.isDone() {
			s.aborting.Store(true)
			list = append(list, s)
		}
	}
	c.csMu.Unlock()
	c.drainMu.Lock()
	for _, s := range list {
		for s.jobsLeft.Load() != 0 {
			c.drainCond.Wait()
		}
	}
	c.drainMu.Unlock()
	if between != nil {
		between()
	}
	for _, s := range list {
		c.finish(s, s.abortStatus())
	}
}

// waitIoctl serves HL_IOCTL_WAIT_CS for one sequence number.
func (c *hctx) waitIoctl(a *hlsys.WaitCSArgs) error {
	in := a.In
	out := a.Out()
	if in.Flags&(waitFlagsInterrupt|waitFlagsInterruptKernelCQ|waitFlagsRegisterInterrupt) != 0 {
		if !c.d.amap.gaudi2 {
			return unix.EPERM // Gaudi has no user interrupts
		}
		return unix.EOPNOTSUPP
	}
	if in.Flags&waitFlagsMultiCS != 0 {
		if c.d.amap.gaudi2 {
			return unix.EPERM // supports_wait_for_multi_cs is false on Gaudi2
		}
		return unix.EOPNOTSUPP
	}
	seq := in.Seq
	*a = hlsys.WaitCSArgs{} // the driver clears the args before filling the output

	c.csMu.Lock()
	if seq == 0 || seq >= c.nextSeq {
		c.csMu.Unlock()
		c.log.Debug().Uint64("seq", seq).Msg("WAIT_CS: sequence number never submitted")
		return unix.EINVAL
	}
	if seq+uint64(len(c.slots)) < c.nextSeq {
		// Older than the window of completion slots: the fence is gone;
		// such a CS has necessarily ended (its slot was reused).
		c.csMu.Unlock()
		out.Status = hlsys.WaitCSStatusCompleted
		out.Flags = hlsys.WaitCSStatusFlagGone
		return nil
	}
	s := c.slots[seq&uint64(len(c.slots)-1)]
	c.csMu.Unlock()
	if s == nil || s.seq != seq { // cannot happen: a seq in the window owns its slot
		out.Status = hlsys.WaitCSStatusCompleted
		out.Flags = hlsys.WaitCSStatusFlagGone
		return nil
	}

	if !s.isDone() {
		if in.TimeoutUs == 0 {
			out.Status = hlsys.WaitCSStatusBusy
			return nil
		}
		c.waiting.Add(1)
		defer c.waiting.Add(-1)
		if in.TimeoutUs == waitForever {
			<-s.done
		} else {
			// usecs_to_jiffies takes an unsigned int: larger values wrap.
			t := time.NewTimer(time.Duration(uint32(in.TimeoutUs)) * time.Microsecond)
			select {
			case <-s.done:
				t.Stop()
			case <-t.C:
				if !s.isDone() {
					out.Status = hlsys.WaitCSStatusBusy
					return nil
				}
			}
		}
	}
	switch s.status {
	case hlsys.WaitCSStatusCompleted:
		out.Status = hlsys.WaitCSStatusCompleted
		if s.timestamp {
			out.Flags |= hlsys.WaitCSStatusFlagTimestampVld
			out.TimestampNsec = s.doneNs
		}
		return nil
	case hlsys.WaitCSStatusTimedOut:
		out.Status = hlsys.WaitCSStatusTimedOut
		return unix.ETIMEDOUT
	default:
		out.Status = hlsys.WaitCSStatusAborted
		return unix.EIO
	}
}

func popcount(x uint32) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}
