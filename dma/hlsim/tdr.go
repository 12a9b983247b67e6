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

// armTDRLocked starts s's TDR (tdrMu held).
func (c *hctx) armTDRLocked(s *cs) {
	s.tdr = time.AfterFunc(s.timeout, func() { c.tdrExpired(s) })
}

// releaseTDR takes s, just ended, off the mirror list, stops its TDR and,
// unless s timed out, arms the TDR of the CS now first if it has none.
func (c *hctx) releaseTDR(s *cs, timedout bool) {
	c.tdrMu.Lock()
	defer c.tdrMu.Unlock()
	if i := slices.Index(c.mirror, s); i >= 0 {
		c.mirror = slices.Delete(c.mirror, i, i+1)
	}
	if s.tdr != nil {
		s.tdr.Stop()
	}
	if !timedout && len(c.mirror) > 0 && c.mirror[0].tdr == nil {
		c.armTDRLocked(c.mirror[0])
	}
}
