package hlsim

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// The Gaudi3 user interrupts a channel raises (gaudi3.go) and the
// WAIT_CS calls that sleep on them.

// g3irq tracks the interrupt waits blocked in WAIT_CS.
type g3irq struct {
	mu      sync.Mutex
	waiters map[*g3waiter]struct{}
}

type g3waiter struct {
	id      uint32
	done    chan struct{}
	aborted bool
}

// g3Interrupt wakes the waits on user interrupt id (and those on any CQ
// interrupt).
func (c *hctx) g3Interrupt(id uint32) {
	c.irq.mu.Lock()
	defer c.irq.mu.Unlock()
	for w := range c.irq.waiters {
		if w.id == id || w.id == g3AnyCQInterrupt {
			delete(c.irq.waiters, w)
			close(w.done)
		}
	}
}

// interruptWait serves WAIT_CS with HL_WAIT_CS_FLAGS_INTERRUPT on Gaudi3
// in the order of _hl_interrupt_wait_ioctl (UP command_submission.c): the
// interrupt id must be a user interrupt, the any-CQ id or the any-decoder
// id (hl_interrupt_wait_ioctl); the counter is
// the u64 at index cq_counters_offset of the kernel CB cq_counters_handle
// (KERNEL_CQ) or at the user address in addr; the wait is registered, then
// the counter compared (>= target: COMPLETED at once); timeout 0 reports
// BUSY; the wait ends COMPLETED when the interrupt comes and the counter
// has reached the target, BUSY with rc 0 at the timeout ("the workload
// wasn't submitted through the driver"), and on a reset with -EIO and the
// args untouched (KERNEL_CQ) or ABORTED with rc 0 (user address).
func (c *hctx) interruptWait(a *hlsys.WaitCSArgs) error {
	in := a.In
	out := a.Out()
	id := (in.Flags & hlsys.WaitCSFlagsInterruptMask) >> hlsys.WaitCSFlagsInterruptShift
	if id != g3AnyCQInterrupt && id != g3AnyDecInterrupt && (id < g3FirstUserInterrupt || id >= g3FirstUserInterrupt+g3UserInterrupts) {
		c.log.Debug().Uint32("id", id).Msg("WAIT_CS: invalid user interrupt")
		return unix.EINVAL
	}
	if in.Flags&hlsys.WaitCSFlagsRegisterInterrupt != 0 {
		return unix.EOPNOTSUPP // timestamp registration is not emulated
	}
	read := func() (uint64, error) {
		var b [8]byte
		if err := copyIn(b[:], in.Seq); err != nil {
			return 0, unix.EFAULT
		}
		return binary.NativeEndian.Uint64(b[:]), nil
	}
	if in.Flags&hlsys.WaitCSFlagsInterruptKernelCQ != 0 {
		c.memMu.RLock()
		cb := c.lookupCB(in.Seq)
		var p *uint64
		// "Validate the cq offset": the index must be below
		// cq_cb->size / 8, the CB's size (at least a page), not its
		// page-rounded mapping.
		if cb != nil && in.CqCountersOffset < uint64(cb.size)/8 {
			p = (*uint64)(unsafe.Pointer(&cb.mem[in.CqCountersOffset*8]))
			// hl_cb_get: the wait holds the CB (its memory stays) until
			// it returns, whatever DESTROY or munmap do meanwhile.
			cb.waitRefs.Add(1)
			defer c.putCB(cb)
		}
		c.memMu.RUnlock()
		if p == nil {
			return unix.EINVAL
		}
		read = func() (uint64, error) { return atomic.LoadUint64(p), nil }
	}
	target, timeoutUs := in.TimeoutUs, in.InterruptTimeoutUs
	kernelCQ := in.Flags&hlsys.WaitCSFlagsInterruptKernelCQ != 0
	// hl_interrupt_wait_ioctl returns a failure before it clears the
	// args (they keep the caller's input); otherwise it clears them and
	// writes the status, with TIMESTAMP_VLD when the wait took a time.
	// _hl_interrupt_wait_ioctl (KERNEL_CQ) takes one on a completion and
	// on the immediate BUSY of timeout 0; the user-address form only on a
	// completion; neither when the wait timed out.
	report := func(status uint32, stamped bool) error {
		*a = hlsys.WaitCSArgs{}
		out.Status = status
		if stamped {
			out.Flags = hlsys.WaitCSStatusFlagTimestampVld
			out.TimestampNsec = c.d.ktime()
		}
		return nil
	}
	var deadline <-chan time.Time
	if timeoutUs != 0 && timeoutUs < waitForever/1000 {
		t := time.NewTimer(time.Duration(timeoutUs) * time.Microsecond)
		defer t.Stop()
		deadline = t.C
	}
	for {
		w := &g3waiter{id: id, done: make(chan struct{})}
		c.irq.mu.Lock()
		c.irq.waiters[w] = struct{}{}
		c.irq.mu.Unlock()
		v, err := read()
		if err != nil || v >= target || timeoutUs == 0 {
			c.irq.mu.Lock()
			delete(c.irq.waiters, w)
			c.irq.mu.Unlock()
			switch {
			case err != nil:
				return err
			case v >= target:
				return report(hlsys.WaitCSStatusCompleted, true)
			default:
				return report(hlsys.WaitCSStatusBusy, kernelCQ)
			}
		}
		c.waiting.Add(1)
		select {
		case <-w.done:
		case <-deadline:
		case <-c.quit:
			c.irq.mu.Lock()
			w.aborted = true
			c.irq.mu.Unlock()
		}
		c.waiting.Add(-1)
		c.irq.mu.Lock()
		_, still := c.irq.waiters[w]
		delete(c.irq.waiters, w)
		aborted := w.aborted
		c.irq.mu.Unlock()
		if aborted {
			if kernelCQ {
				// -EIO: the args are left as the caller passed them.
				return unix.EIO
			}
			// _hl_interrupt_wait_ioctl_user_addr reads the counter
			// once more, then reports the reset as ABORTED with rc 0.
			if v, err := read(); err != nil {
				return err
			} else if v >= target {
				return report(hlsys.WaitCSStatusCompleted, true)
			}
			return report(hlsys.WaitCSStatusAborted, false)
		}
		if still { // the timeout
			return report(hlsys.WaitCSStatusBusy, false)
		}
	}
}
