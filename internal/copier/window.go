package copier

import (
	"runtime"
	"sync/atomic"
	"time"
)

// subWindow bounds how far the driver's CS sequence can run ahead of a
// command submission that its submitter has not yet handed to the
// completion actor (the goroutine was descheduled between the CS ioctl
// and Track). The actor and its retire horizon (cq/horizon.go) can poll
// only what was tracked, and the driver keeps the outcome of a CS whose
// fence slot was reused only for the last HL_CS_OUTCOME_HISTORY_LEN (256)
// CSs that ended (hl_push_cs_outcome, hl_pop_cs_outcome,
// common/command_submission.c). Without a bound, other submitters of the
// device (the other directions' drains, batches' foreign ops) could end
// 256 CSs before the late one was tracked, and its copy, which succeeded,
// would fail with dma.ErrCSOutcomeLost.
//
// Submissions take tickets in order; ticket k may make its CS ioctl only
// once ticket k-subWindowLen has tracked its CS (or given up). So fewer
// than 2*subWindowLen CSs (those of tickets before and after it whose
// ioctls ran later or earlier) can end before a CS is tracked, and the
// horizon (128) polls it before 128 more are tracked: under 256 in all.
// It also bounds the submitters between their ioctl and their Track,
// which the horizon's argument assumes.
//
// A ticket is always released, whatever the submission's outcome, so a
// wait lasts no longer than one submission of the ticket before it
// (SubmitUntil's retries end with its ops' deadlines, ctx or Stop).
type subWindow struct {
	next atomic.Uint64
	_    [56]byte
	turn [subWindowLen]struct {
		k atomic.Uint64 // the ticket that may go next in this slot
		_ [56]byte
	}
	// hookWait (tests) runs when a ticket has to wait for its turn.
	hookWait atomic.Pointer[func()]
}

// subWindowLen is the number of submissions that may be between their
// CS ioctl and their Track at once.
const subWindowLen = 32

func (w *subWindow) init() {
	for i := range w.turn {
		w.turn[i].k.Store(uint64(i))
	}
}

// enter takes the next ticket and waits for its turn; the caller must
// call exit with it.
func (w *subWindow) enter() uint64 {
	k := w.next.Add(1) - 1
	if s := &w.turn[k%subWindowLen].k; s.Load() != k {
		w.wait(s, k)
	}
	return k
}

func (w *subWindow) wait(s *atomic.Uint64, k uint64) {
	if h := w.hookWait.Load(); h != nil {
		(*h)()
	}
	for i := 0; s.Load() != k; i++ {
		if i < 64 {
			runtime.Gosched()
			continue
		}
		time.Sleep(min(time.Duration(i-63)*10*time.Microsecond, time.Millisecond))
	}
}

// exit releases ticket k: the ticket subWindowLen after it may go.
func (w *subWindow) exit(k uint64) { w.turn[k%subWindowLen].k.Store(k + subWindowLen) }
