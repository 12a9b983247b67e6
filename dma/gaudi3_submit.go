package dma

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// g3Submit is Submit in direct PDMA mode: the chunks' packets go into
// their channels' rings and MSQ_PI is stored once per chunk. Either every
// chunk is written or none is. Its waits for room end when stop says so,
// as SubmitUntil's.
func (d *Device) g3Submit(op func() string, chunks []Chunk, stop func() error) (uint64, error) {
	g := d.g3
	if err := g.ensure(); err != nil {
		return 0, err
	}
	now := g.clock() // the submission's start too, unless it waits for room
	retries := g.d.submitRetries.Load()
	if err := g.checkHealth(op, now); err != nil {
		return 0, err
	}
	if err := g.slot(op, stop); err != nil {
		return 0, err
	}
	var chanBuf, lockBuf [g3Chans]*g3Chan // a submission's usual chunks need no allocation
	chans := chanBuf[:0]
	if len(chunks) > len(chanBuf) {
		chans = make([]*g3Chan, 0, len(chunks))
	}
	chans = chans[:len(chunks)]
	for i, ch := range chunks {
		c := g.byCh[ch.Queue]
		switch {
		case c == nil:
			return 0, newErr(op(), ErrInvalid, fmt.Sprintf("queue %d is not a PDMA channel this device uses (%v)", ch.Queue, g.chans), nil)
		case !ch.direct || len(ch.pkts) == 0 || len(ch.pkts)%gaudi3.PIAlign != 0:
			return 0, newErr(op(), ErrInvalid, "chunk is not a Gaudi3 command buffer's packets", nil)
		case len(ch.pkts) > g3MaxChunk:
			return 0, newErr(op(), ErrInvalid, fmt.Sprintf("%d bytes of packets, a chunk takes at most %d", len(ch.pkts), g3MaxChunk), nil)
		case ch.cb == nil || ch.cb.d != d:
			return 0, newErr(op(), ErrInvalid, "chunk of another device's command buffer", nil)
		case ch.cb.released():
			return 0, newErr(op(), ErrClosed, "chunk of a closed command buffer", nil)
		case ch.cb.gen.Load() != ch.gen:
			// Its bytes are the buffer's new packets, its count of
			// completion-counter advances the old ones': the channel's
			// counter would no longer match the targets.
			return 0, newErr(op(), ErrInvalid, "chunk of a command buffer reset since Chunk", nil)
		}
		chans[i] = c
	}
	locked := lockAllInto(lockBuf[:0], chans)
	defer unlockAll(locked)
	// need[k] is the ring bytes the chunks take on locked[k].
	var needBuf [g3Chans]uint32
	need := needBuf[:0]
	if len(locked) > len(needBuf) {
		need = make([]uint32, 0, len(locked))
	}
	need = need[:len(locked)]
	for i, ch := range chunks {
		k := slices.Index(locked, chans[i])
		pi := chans[i].pi + need[k]
		need[k] += gaudi3.PadBeforeWrap(pi, g3RingSize, len(ch.pkts)) + uint32(len(ch.pkts))
	}
	for k, c := range locked {
		if need[k] > g3RingSize {
			return 0, newErr(op(), ErrInvalid, fmt.Sprintf("%d bytes of packets for PDMA channel %d, its ring holds %d", need[k], c.ch, g3RingSize), nil)
		}
		if err := g.room(op, c, need[k], stop); err != nil {
			return 0, err
		}
	}
	if g.d.submitRetries.Load() != retries {
		now = g.clock()
	}
	for i, ch := range chunks {
		c := chans[i]
		g.write(c, ch.pkts)
		c.issued += uint64(ch.incs)
		c.store(gaudi3.RegMSQPI, c.pi)
		g.ring(c)
	}
	g.mu.Lock()
	cs := &g3CS{seq: g.nextSeq, epoch: g.epoch, start: now}
	cs.parts = cs.buf[:0]
	g.nextSeq++
	for _, c := range locked {
		// Its counter reaches c.issued once the last chunk on it is done.
		cs.parts = append(cs.parts, g3Part{c: c, target: c.issued})
	}
	g.pending[cs.seq] = cs
	g.mu.Unlock()
	d.submitted.Add(1)
	return cs.seq, nil
}

// checkHealth is a submission's look at the device: a reset since the
// channels were programmed programs them again (checkReset), and a device
// that is not operational refuses the submission. Each look costs two
// ioctls (RESET_COUNT, DEVICE_STATUS), more than the rest of a submission
// through the rings, which the driver takes no part in: so while the last
// look found the device operational, the next is at most once per
// g3Dev.healthEvery. A reset is then noticed within that time (Wait looks
// too), and a submission written into the channels meanwhile ends
// ABORTED, as the ones in flight when the device was reset do.
func (g *g3Dev) checkHealth(op func() string, t time.Duration) error {
	now := int64(t)
	if last := g.lastHealth.Load(); last != 0 && now-last < int64(g.healthEvery) {
		return nil
	}
	g.lastHealth.Store(0) // looked at again until a look finds the device well
	if err := g.checkReset(); err != nil {
		return g.d.ioErr(op(), "", err)
	}
	raw, serr := hlsys.GetDeviceStatus(g.d.b)
	if serr != nil || !DeviceStatus(raw).Operational() {
		return g.d.notOperational(op(), "submission refused", unix.EBUSY)
	}
	g.lastHealth.Store(now)
	return nil
}

// maxG3Sleep bounds one sleep of a blocking Wait between looks for a reset.
const maxG3Sleep = 10 * time.Millisecond

// healthEvery is the default of g3Dev.healthEvery: how often checkHealth
// looks at a device that was operational at its last look.
const healthEvery = time.Millisecond

// slot waits until fewer than g3MaxPending submissions are in flight,
// forgetting those whose counters have reached their targets, or until
// stop (SubmitUntil) says to give up.
func (g *g3Dev) slot(op func() string, stop func() error) error {
	backoff := g.d.opts.SubmitBackoff
	for attempt := 0; ; attempt++ {
		g.mu.Lock()
		var expired *g3CS // the oldest submission past its TDR
		if len(g.pending) >= g3MaxPending {
			now := g.clock()
			for seq, cs := range g.pending {
				switch {
				case cs.reached():
					delete(g.pending, seq)
				case now-cs.start >= g.tdr && (expired == nil || cs.seq < expired.seq):
					expired = cs
				}
			}
		}
		n := len(g.pending)
		g.mu.Unlock()
		if n < g3MaxPending {
			return nil
		}
		if expired != nil {
			// The TDR does not wait for a Wait: a hung submission nobody
			// waits for would hold its slot for good (no channel lock is
			// held here, which timeout takes).
			g.timeout(expired)
			continue
		}
		if g.d.givingUp() {
			// The watcher's release waits for this call (reset.go), and
			// so does Close.
			return g.d.closedErr(op())
		}
		if serr := stopped(stop); serr != nil {
			return stopErr(op(), fmt.Sprintf("%d submissions still in flight after %d retries", n, attempt), unix.EAGAIN, serr)
		}
		if attempt >= g.d.opts.SubmitRetries {
			return newErr(op(), ErrBusy, fmt.Sprintf("%d submissions still in flight after %d retries", n, attempt), unix.EAGAIN)
		}
		g.d.submitRetries.Add(1)
		time.Sleep(backoff)
		backoff = min(2*backoff, MaxSubmitBackoff)
	}
}

// room waits until c's ring has n free bytes (c locked), after bringing
// MSQ_PI back to 0 once the channel is idle if it would pass g3PILimit.
// It retries like a CS submission that finds its queue full. The
// registers and the counter are read only when needed: they are the
// device's (the emulator's worker writes them on another core), and the
// MSQ_CI read last is a lower bound of the current one. It gives up when
// stop (SubmitUntil) says so.
func (g *g3Dev) room(op func() string, c *g3Chan, n uint32, stop func() error) error {
	backoff := g.d.opts.SubmitBackoff
	for attempt := 0; ; attempt++ {
		if uint64(c.pi)+uint64(n) > g3PILimit && c.count() >= c.issued {
			g.program(c, false)
		}
		if uint64(c.pi)+uint64(n) <= g3PILimit {
			if gaudi3.RingFree(c.pi, c.ci, g3RingSize) < n {
				c.ci = c.load(gaudi3.RegMSQCI)
			}
			if gaudi3.RingFree(c.pi, c.ci, g3RingSize) >= n {
				return nil
			}
		}
		if g.d.givingUp() {
			return g.d.closedErr(op())
		}
		if serr := stopped(stop); serr != nil {
			return stopErr(op(), fmt.Sprintf("PDMA channel %d ring still full after %d retries", c.ch, attempt), unix.EAGAIN, serr)
		}
		if attempt >= g.d.opts.SubmitRetries {
			return newErr(op(), ErrBusy, fmt.Sprintf("PDMA channel %d ring still full after %d retries", c.ch, attempt), unix.EAGAIN)
		}
		g.d.submitRetries.Add(1)
		time.Sleep(backoff)
		backoff = min(2*backoff, MaxSubmitBackoff)
	}
}

// write copies packets into c's ring at MSQ_PI, NOP padding first if they
// would straddle the ring's end, and advances c.pi (not yet stored).
func (g *g3Dev) write(c *g3Chan, pkts []byte) {
	if pad := gaudi3.PadBeforeWrap(c.pi, g3RingSize, len(pkts)); pad > 0 {
		off := c.pi & (g3RingSize - 1)
		for i := uint32(0); i < pad; i += gaudi3.NOPSize {
			putG3NOP(c.ring[off+i:off+i+gaudi3.NOPSize], 0)
		}
		c.pi += pad
	}
	off := c.pi & (g3RingSize - 1)
	copy(c.ring[off:], pkts)
	c.pi += uint32(len(pkts))
}

// Progress is a stamp of the device's completions, read from memory
// without a driver call or a lock, for a caller polling submissions in a
// loop: the value changes whenever a submission may have ended, so a
// Wait(seq, 0) is worth making only when it moved. On Gaudi3 in direct
// PDMA mode it is the sum of the channels' completion counters, which
// the device advances as it completes work (a reset that zeroes them
// changes it too). ok is false when there is no such stamp (Gaudi2,
// whose submissions end only as WAIT_CS reports; direct mode not set up
// yet; the Device closed): poll with Wait then.
func (d *Device) Progress() (stamp uint64, ok bool) {
	if d.g3 == nil || !d.enterFast() {
		return 0, false
	}
	defer d.leave()
	// The counters are unmapped only by Close, under the gate's write
	// lock (teardown, or the backend's Close before released).
	p := d.g3.counters.Load()
	if p == nil {
		return 0, false
	}
	for i := range p {
		stamp += atomic.LoadUint64(&p[i])
	}
	return stamp, true
}

// g3Wait is Wait in direct PDMA mode.
func (d *Device) g3Wait(op func() string, seq uint64, timeout time.Duration) (CSStatus, error) {
	g := d.g3
	remaining := max(timeout, 0)
	delay := 20 * time.Microsecond
	slept := false  // a sleep ended with the submission still running
	polled := false // that sleep polled the counters (no interrupt wait)
	for {
		st, cs, err := g.status(op, seq)
		if st != CSBusy || err != nil {
			return st, err
		}
		if d.lost() {
			// The context is about to be released (reset.go).
			return CSUnknown, pendingErr(op(), nil)
		}
		t := g.clock() // one clock read per poll
		if t-cs.start >= g.tdr {
			g.timeout(cs)
			continue
		}
		if remaining <= 0 {
			// Polled: look for a reset now and then, so that a reset ends
			// the submissions of a caller that only polls.
			now := int64(t)
			if last := g.lastCheck.Load(); now-last > int64(g.healthEvery) && g.lastCheck.CompareAndSwap(last, now) {
				if err := g.checkReset(); err != nil {
					return CSUnknown, d.ioErr(op(), "", err)
				}
				if st, _, err := g.status(op, seq); st != CSBusy || err != nil {
					return st, err
				}
			}
			return CSBusy, nil
		}
		// A look for a reset before the first sleep (at most once per
		// healthEvery, as a polling wait's) and after each sleep the
		// submission did not end in: a submission written into the
		// channels of a device reset since Submit's last look
		// (checkHealth) never reaches its target, and a reset before a
		// sleep wakes nobody (sleeps are bounded: maxG3Sleep).
		if now := int64(t); slept || now-g.lastCheck.Load() > int64(g.healthEvery) {
			g.lastCheck.Store(now)
			if err := g.checkReset(); err != nil {
				return CSUnknown, d.ioErr(op(), "", err)
			}
			if st, _, err := g.status(op, seq); st != CSBusy || err != nil {
				return st, err
			}
			if slept && polled && d.g3ResetPending() {
				// The release watchdog runs: the watcher may not have
				// seen the reset yet, or be held at the gate by a Close
				// that waits for this Wait. Sleeping on would hold the
				// release (reset.go). An interrupt wait sees the
				// watchdog itself (sleep); a counter poll asks the
				// driver (a reset the watcher saw ends the loop above).
				return CSUnknown, pendingErr(op(), nil)
			}
		}
		wait := min(remaining, g.tdr-(g.clock()-cs.start)+time.Millisecond, maxG3Sleep)
		start := time.Now()
		if err := g.sleep(op, cs, wait, &delay, &polled); err != nil {
			return CSUnknown, err
		}
		remaining -= time.Since(start)
		slept = true
	}
}

// status reports a submission's state: CSBusy with the submission while
// it runs.
func (g *g3Dev) status(op func() string, seq uint64) (CSStatus, *g3CS, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cs := g.pending[seq]
	if cs == nil {
		if seq >= g.nextSeq {
			return CSUnknown, nil, newErr(op(), ErrInvalid, "sequence number never submitted", unix.EINVAL)
		}
		st, failed := g.ended[seq]
		if !failed || seq+g3EndedKeep < g.nextSeq {
			return CSCompleted, nil, nil // completed, or failed too long ago (as a gone CS)
		}
		if st == CSTimedOut {
			return st, nil, newErr(op(), ErrCSTimedOut, "the submission did not finish within the timeout; its PDMA channels were reset", unix.ETIMEDOUT)
		}
		return st, nil, newErr(op(), ErrCSAborted, "the device was reset or its PDMA channel was reset", unix.EIO)
	}
	if cs.reached() {
		delete(g.pending, seq)
		return CSCompleted, nil, nil
	}
	return CSBusy, cs, nil
}

// sleep blocks up to wait for cs's first unfinished channel: in WAIT_CS
// on its user interrupt where the driver takes it, else by sleeping
// between looks at the counter.
func (g *g3Dev) sleep(op func() string, cs *g3CS, wait time.Duration, delay *time.Duration, polled *bool) error {
	*polled = false
	var p g3Part
	for _, x := range cs.parts {
		if x.c.count() < x.target {
			p = x
			break
		}
	}
	if p.c == nil {
		return nil
	}
	if p.c.hasIntr && !g.intrOff.Load() {
		us := max(uint64(wait/time.Microsecond), 1)
		_, err := hlsys.WaitForInterruptKernelCQ(g.d.b, g.cqHandle, uint64(p.c.slot), p.target, p.c.intr, us)
		switch {
		case err == nil, errors.Is(err, unix.EINTR), errors.Is(err, unix.ETIMEDOUT):
			return nil
		case errors.Is(err, unix.EIO):
			return nil // a reset: checkReset follows
		case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EPERM):
			// hl_wait_ioctl refuses waits while the device is not
			// operational (RULES.md W1). A reset in progress ends with
			// the device operational again, and checkReset then ends
			// what was in flight ABORTED: wait it out within this
			// wait's time rather than fail the caller's Wait. A broken
			// device (or an unreadable status) is an error.
			raw, serr := hlsys.GetDeviceStatus(g.d.b)
			if serr == nil && DeviceStatus(raw).Operational() && g.d.rw != nil {
				// Refused on an operational device: the release
				// watchdog of a reset runs (reset.go's resetPending).
				return pendingErr(op(), err)
			}
			if serr == nil && !DeviceStatus(raw).Broken() {
				time.Sleep(min(wait, *delay))
				*delay = min(2**delay, time.Millisecond)
				return nil
			}
			if e := g.d.notOperational(op(), "the driver refused the wait", err); e != nil {
				return e
			}
			return nil
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOTTY):
			g.d.log.Info().Err(err).Msg("WAIT_CS on a user interrupt refused: polling the Gaudi3 completion counters instead")
			g.intrOff.Store(true)
		default:
			return g.d.ioErr(op(), "", err)
		}
	}
	*polled = true
	time.Sleep(min(wait, *delay))
	*delay = min(2**delay, time.Millisecond)
	return nil
}

// timeout is the TDR of direct mode: cs (and every other unfinished
// submission on its channels) ends, and the channels are stopped and
// programmed again, before anyone learns that it ended. A submission that
// ends so may have work queued on other channels too: those are stopped
// as well (stopSetLocked), or they would go on writing its destination
// after it was reported ABORTED.
func (g *g3Dev) timeout(cs *g3CS) {
	locked := lockAll(g.slots) // the channels to stop are known only under g.mu
	defer unlockAll(locked)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending[cs.seq] != cs {
		return // decided meanwhile
	}
	if cs.reached() {
		// It completed after the caller saw it unfinished: nothing timed
		// out, and the work behind it on its channels is healthy.
		delete(g.pending, cs.seq)
		return
	}
	seed := make([]*g3Chan, 0, len(cs.parts))
	for _, p := range cs.parts {
		seed = append(seed, p.c)
	}
	stop := g.stopSetLocked(seed)
	g.d.log.Warn().Uint64("seq", cs.seq).Dur("timeout", g.tdr).Int("channels", len(stop)).
		Msg("Gaudi3 submission timed out: its PDMA channels are reset")
	timedOut := !cs.reached()
	g.recoverLocked(stop, CSAborted, false)
	if timedOut {
		g.endLocked(cs.seq, CSTimedOut)
	}
}

// stopSetLocked returns the channels a recovery of seed must stop (g.mu
// held, every channel locked): seed, and every channel on which an
// unfinished submission touching the set still has work, until no
// channel is added. recoverLocked ends such a submission as a whole.
func (g *g3Dev) stopSetLocked(seed []*g3Chan) []*g3Chan {
	in := make(map[*g3Chan]bool, len(g.slots))
	for _, c := range seed {
		in[c] = true
	}
	for grew := true; grew; {
		grew = false
		for _, cs := range g.pending {
			if !cs.on(in) {
				continue
			}
			for _, p := range cs.parts {
				if !in[p.c] && p.c.count() < p.target {
					in[p.c], grew = true, true
				}
			}
		}
	}
	out := make([]*g3Chan, 0, len(in))
	for _, c := range g.slots {
		if in[c] {
			out = append(out, c)
		}
	}
	return out
}

// g3Packets encodes the LIN_PDMA packets of a copy (or memset) into b:
// one per MaxLinDMASize bytes, each with a completion write to the scratch
// word and advancing the completion queue (see the file comment of
// gaudi3.go). It returns the bytes written.
func (g *g3Dev) packets(b []byte, dst, src, size uint64, memset bool, dir gaudi3.Dir) int {
	n := 0
	for size > 0 {
		k := min(size, MaxLinDMASize)
		p := gaudi3.LinPDMA{Src: src, Dst: dst, Size: uint32(k), Dir: dir, Memset: memset,
			IncContextID: true, DescCommit: true, AdvanceCQ: true, WrComp: true, WrCompAddr: g.scratchVA}
		out, _ := p.Append(b[n:n])
		n += len(out)
		dst += k
		if !memset {
			src += k
		}
		size -= k
	}
	return n
}

// putG3NOP encodes a PQM NOP with the packet flags' barriers.
func putG3NOP(b []byte, f PacketFlags) int {
	out, _ := gaudi3.NOP{EngBarrier: f&EB != 0, MsgBarrier: f&MB != 0}.Append(b[:0])
	return len(out)
}
