package hlsim

import (
	"runtime"

	"github.com/gxfer/gxfer/internal/gaudi3"
)

// Doorbells on a Gaudi3 PDMA channel, and the dropping of the work queued
// on it (a stop or a reset).

// Doorbell is the model's stand-in for a store to a mapped register that
// it cannot trap: after storing to a CH_A block (MSQ_PI, or a new
// DESC_SUBMIT_FIFO_CFG), the device path may call it with the mapped
// block; the worker then takes the new MSQ_PI as one submission at once,
// and a channel stopped by its FIFO mode is stopped before Doorbell
// returns. Without the call the worker finds the same values within
// g3IdlePoll after work, g3IdlePollMax when idle long. Real hardware
// needs no such call.
func (c *hctx) Doorbell(block []byte) {
	if len(block) == 0 || c.usable() != nil {
		return
	}
	g := c.bellOf(&block[0])
	if g == nil {
		return
	}
	for {
		// gen is read before the look at the queue's state: a drop (a
		// stop, a reset) after this read changes it, and mark then marks
		// nothing; one before it is seen by mark as a stopped queue, or
		// by MSQ_PI as software programmed it again.
		gen := g.gen.Load()
		switch g.mark(gen) {
		case bellMarked:
			g.ringBell()
			return
		case bellStopped:
			g.mu.Lock()
			g.stopLocked()
			g.mu.Unlock()
			return
		case bellReleased:
			return
		}
		// Dropped meanwhile: look again.
	}
}

// What mark did.
const (
	bellMarked   = iota // announced (or nothing new): ring the worker
	bellStopped         // software stopped the queue: drop its work
	bellDropped         // a drop came after gen was read: look again
	bellReleased        // the context released the register file
)

// mark looks at the queue's state and marks the new MSQ_PI with the
// faults it draws, under bmu: the registers are read under it only, as
// g3Release marks the channel released under it before the file may be
// unmapped (a Doorbell racing the context's Close). gen was read before;
// bellDropped if a drop came in between (a drop advances gen under bmu):
// the MSQ_PI read may then be the dropped queue's, and its mark work that
// the channel, programmed again, never reaches (counted submitted, never
// ended) or was never given.
func (g *g3chan) mark(gen uint64) int {
	if g.markHook != nil {
		g.markHook()
	}
	g.bmu.Lock()
	defer g.bmu.Unlock()
	if g.released {
		return bellReleased
	}
	if g.stopped() {
		return bellStopped
	}
	if g.gen.Load() != gen {
		return bellDropped
	}
	pi := g.load(gaudi3.RegMSQPI)
	if pi != g.announcedLocked() {
		// The submission's faults are drawn now, in doorbell order, as a
		// CS's are at submission.
		m := g3mark{pi: pi}
		m.hang, m.abort, m.delay = g.c.d.injected()
		g.c.d.st.submitted.Add(1)
		g.marks = append(g.marks, m)
	}
	return bellMarked
}

// ringBell wakes the channel's worker.
func (g *g3chan) ringBell() {
	if g.bell.ring() {
		// As a CS ioctl that wakes a parked engine (csIoctl): the
		// worker's goroutine was made runnable on this core; let it run
		// now rather than after this caller blocks.
		runtime.Gosched()
	}
}

// announcedLocked is the MSQ_PI up to which work was announced by a
// doorbell's mark or taken by the worker (bmu held).
func (g *g3chan) announcedLocked() uint32 {
	if n := len(g.marks); n > 0 {
		return g.marks[n-1].pi
	}
	if !g.tactive {
		return g.load(gaudi3.RegMSQCI)
	}
	return g.taken
}

// stopped reports whether software has stopped the queue: a
// DESC_SUBMIT_FIFO_CFG mode other than MSQ, or CQ_RECONFIG set ("stop cq
// to enable reconfig of pi/ci and descriptor").
func (g *g3chan) stopped() bool {
	return gaudi3.FifoCfgMode.Get(g.load(gaudi3.RegDescSubmitFifoCfg)) != gaudi3.FifoCfgMSQ ||
		gaudi3.CQReconfigEn.Get(g.load(gaudi3.RegCQReconfig)) != 0
}

// stopLocked drops the channel's queued work and the completions not yet
// signalled; it resumes from the MSQ_CI software writes while stopped.
// The registers are software's.
func (g *g3chan) stopLocked() { g.dropLocked(false) }

// resetLocked is a device reset as the channel sees it: every register
// cleared.
func (g *g3chan) resetLocked() { g.dropLocked(true) }

// dropLocked is stopLocked, and clears the registers too if regs is set:
// with the doorbells, under bmu, so that no Doorbell announces the old
// MSQ_PI after the marks were dropped and before the registers were.
// Every submission dropped ends ABORTED: the executed ones whose
// completion was held back, the hung one (not the one that failed: step
// counted it), and the doorbells announced (counted submitted by
// Doorbell) that the worker had not taken yet.
func (g *g3chan) dropLocked(regs bool) {
	n := len(g.pend)
	if g.stalled && !g.halted {
		n++ // the hung doorbell (a failed one was counted when it failed)
	}
	g.active, g.stalled, g.halted, g.ci, g.pend = false, false, false, 0, g.pend[:0]
	g.bmu.Lock()
	n += len(g.marks)
	g.gen.Add(1) // a doorbell that looked before the drop marks nothing (mark)
	if regs && !g.released {
		// A released file may be unmapped (a reset in the background
		// racing the context's Close); the context let go of it.
		clear(g.regs)
	}
	g.marks, g.tactive, g.taken = g.marks[:0], false, 0
	g.bmu.Unlock()
	g.c.d.st.aborted.Add(uint64(n))
}

// g3Drop ends the work still queued on the context's PDMA channels
// ABORTED, as abortAll ends its CSs (teardown, the workers stopped): a
// hung doorbell, the doorbells announced behind it, the completions held
// back. A release that reset the device dropped them already; one that
// did not (the device not operational, a stop not yet seen) left them.
func (c *hctx) g3Drop() { c.g3EachLocked((*g3chan).stopLocked) }

// g3EachLocked runs f on each of the context's channels, its mu held.
func (c *hctx) g3EachLocked(f func(*g3chan)) {
	c.memMu.RLock()
	chans := c.g3chans
	c.memMu.RUnlock()
	if c.eachHook != nil {
		c.eachHook()
	}
	for _, g := range chans {
		if g != nil {
			g.mu.Lock()
			f(g)
			g.mu.Unlock()
		}
	}
}
