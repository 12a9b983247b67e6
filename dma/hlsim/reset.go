package hlsim

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// What the driver does when a CS times out or a fatal error asks for a
// reset (RULES.md, R rows). Sources: common/device.c (hl_device_cond_reset,
// hl_device_reset, device_release_watchdog_func, hpriv_release,
// hl_device_release, device_kill_open_processes) and
// common/command_submission.c (cs_timedout, force_complete_cs,
// hl_wait_ioctl, cs_do_release).
//
//   - cs_timedout: a CS still in flight after its timeout is marked timed
//     out, unless it has CS_FLAGS_SKIP_RESET_ON_TIMEOUT; CS_TIMEOUT is
//     posted for the first TDR since the open. With reset_on_lockup (the
//     default) and no SKIP_RESET the driver calls hl_device_cond_reset with
//     DEVICE_RESET; with reset_on_lockup=0 it sets needs_reset; with
//     SKIP_RESET it does nothing more.
//   - hl_device_cond_reset: without a compute context, or without a
//     registered eventfd while no release watchdog runs, or while the
//     device is already in reset, it posts the events and hard-resets at
//     once (a reset already running absorbs it). Otherwise it arms the
//     release watchdog (unless it runs already), posts the events (the
//     eventfd is signalled) and completes every CS fence on the mirror
//     list with -EIO (force_complete_cs), waking blocked waiters with
//     ABORTED, and the user-interrupt waits; the engines are not stopped.
//   - while the watchdog runs the device is OPERATIONAL, but hl_wait_ioctl
//     answers every WAIT_CS with EBUSY.
//   - the release of the context under the watchdog cancels it and
//     hard-resets; the file is off the list of processes to kill, so no
//     kill. The watchdog expiring hard-resets with the context still open.
//   - the hard reset (the emulator's hardReset): IN_RESET, engines halted,
//     CSs rolled back (the timed-out one's fence -ETIMEDOUT, the others
//     -EIO), then, if the fd is still open, 1 s for the user to close it
//     and SIGKILL to its holder; the device is OPERATIONAL again once the
//     holder has released it.

// killGrace is device_kill_open_processes' ssleep(1) before the SIGKILL.
const killGrace = time.Second

// Reset is fault injection standing for a fatal device error that the
// driver handles with hl_device_cond_reset and a DEVICE_RESET event (a
// firmware heartbeat failure, a TPC assert, an engine error needing a
// reset): a TDR without a timed-out CS. With no context open the device
// is hard-reset at once. If the open context has no registered eventfd
// (and no release watchdog runs), it is hard-reset at once: every CS in
// flight ends ABORTED, the device reads IN_RESET, and 1 s later the
// process holding the context is killed (Config.Kill). Otherwise the
// context is notified (NOTIFIER DEVICE_RESET, eventfd signalled), every
// CS in flight has its fence completed ABORTED (-EIO) while the engines
// go on, WAIT_CS answers EBUSY, and the device is hard-reset when the
// context is released or, with a kill, when Config.ReleaseWatchdog ends.
// Reset during a reset only posts the event.
func (d *Device) Reset() { d.condReset(nil, hlsys.NotifierDeviceReset, "requested") }

// condReset is hl_device_cond_reset with a DEVICE_RESET event among
// events. With only != nil it applies only while that context is the
// open one (the TDR or channel error of a context being released: the
// release resets).
func (d *Device) condReset(only *hctx, events uint64, reason string) {
	d.mu.Lock()
	c := d.ctx
	switch {
	case d.closed, only != nil && c != only:
		d.mu.Unlock()
		return
	case c == nil:
		// No compute context: hl_device_reset at once; nobody to kill.
		if d.status.Load() == hlsys.DeviceStatusInReset {
			d.mu.Unlock()
			return
		}
		d.status.Store(hlsys.DeviceStatusInReset)
		d.st.resets.Add(1)
		d.status.Store(hlsys.DeviceStatusOperational)
		d.mu.Unlock()
		d.log.Warn().Str("reason", reason).Msg("device hard reset (no context)")
		return
	case c.state.Load() == ctxClosed && !c.holdsFile():
		d.mu.Unlock()
		return // the release under way resets if it must
	case d.status.Load() == hlsys.DeviceStatusInReset:
		// hl_device_reset returns at once while in reset.
		d.mu.Unlock()
		c.notify(events)
		return
	}
	if !d.wdActive.Load() && !c.hasEventFD() {
		// "There is no point in postponing the reset if user is not
		// registered for events."
		d.status.Store(hlsys.DeviceStatusInReset)
		d.bg.Add(1)
		d.mu.Unlock()
		c.notify(events)
		d.log.Warn().Str("reason", reason).Msg("device hard reset: no eventfd registered")
		go d.hardReset(c)
		return
	}
	if !d.wdActive.Load() {
		d.wdCtx = c
		d.wdT = time.AfterFunc(d.cfg.ReleaseWatchdog, d.watchdogFire)
		d.wdActive.Store(true)
		d.log.Warn().Str("reason", reason).Dur("watchdog", d.cfg.ReleaseWatchdog).
			Msg("device reset pending: hard reset unless the context is released")
	}
	d.mu.Unlock()
	c.notify(events)
	c.forceComplete()
}

// stopWatchdogLocked cancels the release watchdog (d.mu held).
func (d *Device) stopWatchdogLocked() {
	if d.wdT != nil {
		d.wdT.Stop()
		d.wdT = nil
	}
	d.wdCtx = nil
	d.wdActive.Store(false)
}

// watchdogFire is device_release_watchdog_func: the context was not
// released in time.
func (d *Device) watchdogFire() {
	d.mu.Lock()
	c := d.wdCtx
	if d.closed || !d.wdActive.Load() || c == nil {
		d.mu.Unlock()
		return
	}
	d.wdT, d.wdCtx = nil, nil
	d.wdActive.Store(false)
	d.status.Store(hlsys.DeviceStatusInReset)
	d.bg.Add(1)
	d.mu.Unlock()
	d.log.Warn().Msg("device hard reset: the context was not released within the release watchdog")
	d.hardReset(c)
}

// hardReset is hl_device_reset(HL_DRV_RESET_HARD) run from the reset
// work, the device already IN_RESET (d.bg counted by the caller):
// cleanup_resources (engines halted, CSs rolled back, waiters woken), then
// device_kill_open_processes, then, once the holder has released the
// context, OPERATIONAL.
func (d *Device) hardReset(c *hctx) {
	defer d.bg.Done()
	c.g3Reset()
	// RESET_COUNT moves once the Gaudi3 channels are cleared: a device
	// path that sees it may program them again (when operational).
	d.st.resets.Add(1)
	c.abortAll(nil)
	if c.holdsFile() {
		grace := killGrace
		if d.testGrace > 0 {
			grace = d.testGrace
		}
		select {
		case <-time.After(grace):
		case <-d.quit:
		}
		d.mu.Lock()
		// A context held by an export (held.go) is killed too: its file
		// is still on the list; its Backend is already closed.
		kill := !d.closed && (c.state.CompareAndSwap(ctxOpen, ctxKilled) || c.holdsFile())
		d.mu.Unlock()
		if kill {
			d.st.kills.Add(1)
			if d.cfg.Kill == nil {
				d.log.Error().Int("pid", selfPID).Msg("killing the process holding the device (SIGKILL)")
				_ = unix.Kill(selfPID, unix.SIGKILL)
			} else {
				d.log.Warn().Msg("killing the process holding the device (Config.Kill)")
				d.cfg.Kill()
			}
		}
	}
	select {
	case <-c.released:
	case <-d.quit:
		return
	}
	d.mu.Lock()
	if !d.closed {
		d.status.Store(hlsys.DeviceStatusOperational)
	}
	d.mu.Unlock()
}

// releaseReset decides, as c is being released (teardown), whether the
// release hard-resets the device, and if so starts the reset: status
// IN_RESET, the Gaudi3 channels cleared, RESET_COUNT moved. teardown's
// abort then halts the engines and rolls the CSs back; the device is
// OPERATIONAL once the context is gone. The driver resets from the
// release when the release watchdog runs (hpriv_release, hl_device_reset
// cancelling it), and when CSs still hold the context (hl_device_release:
// "device still in use") - the emulator counts the latter as a reset
// only when the device needs one (reset_on_lockup=0), which is what
// clears NEEDS_RESET; the plain close with CSs in flight stays as D9
// describes. A Gaudi3 context released while a PDMA channel is busy
// resets the device too (hpriv_release's idle check, g3Busy; RULES X13).
func (d *Device) releaseReset(c *hctx) bool {
	busy := c.inFlight()
	// Direct-mode work holds no CS, so the context's release does not
	// wait for it: the driver's idle check after the release
	// (hpriv_release, reset_if_device_not_idle on by default) finds a
	// channel still busy and resets the device (g3Busy). Only the
	// context owning the device is checked (a context that never got it
	// has no channels).
	g3busy := d.amap.gaudi3 && c.g3Busy()
	d.mu.Lock()
	reset := false
	switch {
	case d.closed:
	case d.wdActive.Load() && d.wdCtx == c:
		d.stopWatchdogLocked()
		reset = true
	case d.status.Load() == hlsys.DeviceStatusNeedsReset && busy:
		reset = true
	case g3busy && d.status.Load() == hlsys.DeviceStatusOperational:
		reset = true
	}
	if reset {
		d.status.Store(hlsys.DeviceStatusInReset)
	}
	d.mu.Unlock()
	if reset {
		d.log.Warn().Msg("device hard reset from the context's release")
		c.g3Reset()
		d.st.resets.Add(1)
	}
	return reset
}

// needsReset is cs_timedout with reset_on_lockup=0: needs_reset set.
func (d *Device) needsReset() {
	d.mu.Lock()
	if !d.closed && d.status.Load() == hlsys.DeviceStatusOperational {
		d.status.Store(hlsys.DeviceStatusNeedsReset)
	}
	d.mu.Unlock()
}

// tdrExpired is cs_timedout: the CS is still in flight after its timeout.
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
	if !s.skipReset {
		s.timedout = true
	}
	s.mu.Unlock()
	c.log.Warn().Uint64("seq", s.seq).Bool("skip_reset", s.skipReset).Msg("CS timed out (TDR)")
	var events uint64
	if c.tdrPosted.CompareAndSwap(false, true) {
		events = hlsys.NotifierCSTimeout
	}
	switch {
	case s.skipReset:
	case c.d.cfg.NoResetOnLockup:
		c.d.needsReset()
	default:
		c.d.condReset(c, events|hlsys.NotifierDeviceReset, "CS timeout")
		return
	}
	if events != 0 {
		c.notify(events)
	}
}

// forceComplete is hl_abort_waiting_for_completions: the fence of every
// CS on the mirror list completes with -EIO (force_complete_cs) and the
// user-interrupt waits end -EIO (hl_release_pending_user_interrupts). The
// CSs stay in flight: their jobs run on (a hung one stays hung) and end
// them later without changing what the fence said.
func (c *hctx) forceComplete() {
	c.tdrMu.Lock()
	list := append([]*cs(nil), c.mirror...)
	c.tdrMu.Unlock()
	for _, s := range list {
		s.mu.Lock()
		if s.ended || s.forced {
			s.mu.Unlock()
			continue
		}
		s.forced = true
		s.status = hlsys.WaitCSStatusAborted
		s.mu.Unlock()
		if s.accepted {
			c.d.st.aborted.Add(1)
		}
		s.markDone()
	}
	c.g3AbortWaits()
}

// inFlight reports whether a CS of the context has not ended (holds the
// context, in the driver's terms).
func (c *hctx) inFlight() bool {
	c.tdrMu.Lock()
	n := len(c.mirror)
	c.tdrMu.Unlock()
	return n > 0
}

// abortAll halts the engines and rolls back every CS not yet ended, ABORTED
// (TIMEDOUT if its TDR marked it timed out; a fence already forced keeps
// its ABORTED): engines drop the queued jobs and stop a running one at the
// next packet boundary; once all have drained, between runs and only then
// are the CSs ended and their waiters woken.
func (c *hctx) abortAll(between func()) {
	c.csMu.Lock()
	var list []*cs
	seen := map[*cs]bool{}
	add := func(s *cs) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		s.mu.Lock()
		ended := s.ended
		s.mu.Unlock()
		if !ended {
			s.aborting.Store(true)
			list = append(list, s)
		}
	}
	for _, s := range c.slots {
		add(s)
	}
	c.tdrMu.Lock()
	mirror := append([]*cs(nil), c.mirror...) // forced CSs whose slot was reused
	c.tdrMu.Unlock()
	for _, s := range mirror {
		add(s)
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
