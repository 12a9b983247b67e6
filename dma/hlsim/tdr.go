package hlsim

import (
	"slices"
	"time"
)

// The TDR (timeout detection and recovery) watches one CS at a time: the
// oldest of those scheduled and not yet ended, the first on the driver's
// cs_mirror_list. hl_hw_queue_schedule_cs (common/hw_queue.c) adds each
// scheduled CS to the list and arms its TDR only when it is the first
// entry; cs_handle_tdr (common/command_submission.c), called as a CS is
// released, arms the TDR of the CS now first, with that CS's own timeout,
// unless the released CS itself timed out ("Don't cancel TDR in case this
// CS was timedout because we might be running from the TDR context"). A
// CS queued behind another so gets its full timeout from the moment the
// one before it ends, not from its submission.

// The emulation keeps one timer per context rather than one per CS
// (time.AfterFunc and Stop for each CS cost more than the rest of the CS
// ioctl): each CS first on the list records its deadline when its TDR is
// armed; the timer fires no later than the armed CS's deadline, and a
// timer that fires early (its CS ended meanwhile) re-arms for the CS
// then armed, if any. This is emulator machinery: the driver's TDR is a
// delayed work item per CS (cs->work_tdr).

// scheduleTDR puts s, just scheduled, on the mirror list, arming its TDR
// if it is the first there.
func (c *hctx) scheduleTDR(s *cs) {
	c.tdrMu.Lock()
	defer c.tdrMu.Unlock()
	c.mirror = append(c.mirror, s)
	if len(c.mirror) == 1 {
		c.armTDRLocked(s)
	}
}

// armTDRLocked starts s's TDR (tdrMu held): its deadline is its timeout
// from now; the timer is moved earlier if it would fire after that.
func (c *hctx) armTDRLocked(s *cs) {
	now := c.d.clock()
	s.tdrArmed, s.tdrDue = true, now+s.timeout
	switch {
	case c.tdrT == nil:
		c.tdrT = time.AfterFunc(s.timeout, c.tdrFire)
	case c.tdrAt != 0 && c.tdrAt <= s.tdrDue:
		return // fires in time; it re-arms for s then
	default:
		c.tdrT.Reset(s.timeout)
	}
	c.tdrAt = s.tdrDue
}

// tdrFire is the context's TDR timer: the armed CS (first on the list)
// times out if its deadline passed, or the timer waits for it.
func (c *hctx) tdrFire() {
	c.tdrMu.Lock()
	c.tdrAt = 0
	var expired *cs
	if len(c.mirror) > 0 && c.mirror[0].tdrArmed {
		s := c.mirror[0]
		if left := s.tdrDue - c.d.clock(); left > 0 {
			c.tdrT.Reset(left)
			c.tdrAt = s.tdrDue
		} else {
			expired = s
		}
	}
	c.tdrMu.Unlock()
	if expired != nil {
		c.tdrExpired(expired)
	}
}

// releaseTDR takes s, just ended, off the mirror list and, unless s timed
// out, arms the TDR of the CS now first if it has none.
func (c *hctx) releaseTDR(s *cs, timedout bool) {
	c.tdrMu.Lock()
	defer c.tdrMu.Unlock()
	if i := slices.Index(c.mirror, s); i >= 0 {
		c.mirror = slices.Delete(c.mirror, i, i+1)
	}
	s.tdrArmed = false
	if !timedout && len(c.mirror) > 0 && !c.mirror[0].tdrArmed {
		c.armTDRLocked(c.mirror[0])
	}
}

// stopTDR stops the timer of a context whose CSs have all ended.
func (c *hctx) stopTDR() {
	c.tdrMu.Lock()
	defer c.tdrMu.Unlock()
	if c.tdrT != nil {
		c.tdrT.Stop()
		c.tdrAt = 0
	}
}
