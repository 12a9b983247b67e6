package cq

import (
	"math/bits"
	"sync/atomic"
)

// horizon bounds how long a tracked submission can go unpolled while
// later ones end (ActorConfig.RetireHorizon): it keeps, per residue of
// the sequence number modulo its size n, the last submission tracked;
// the Track of sequence number S finds there the one of S-n and, if
// nobody has retired it, polls it on the tracking goroutine.
//
// Why it is needed: the driver forgets how a CS ended once enough later
// CSs have ended. Its fence lives in one of max_pending_cs slots
// (hl_ctx_get_fence, common/context.c) until the slot is reused; then
// WAIT_CS consults a store of the outcomes of the last
// HL_CS_OUTCOME_HISTORY_LEN (256) CSs that ended with CS_FLAGS_TIMESTAMP
// (hl_push_cs_outcome, hl_pop_cs_outcome, common/command_submission.c),
// and for an older one reports the fence gone with no outcome
// (dma.ErrCSOutcomeLost): a copy that succeeded would fail. The actor
// polls in bounded sweeps and leaves a watched CS to its waiter, and a
// waiter may be descheduled for as long as the machine pleases, so
// nothing else bounds the CSs that end before an unretired one is
// polled. With the horizon a CS is polled by the Track of the CS n after
// it at the latest: with n = 128 and 64 fence slots, fewer than 256 CSs
// can have ended after it by then unless more than 64 submitters sit
// between their CS ioctl and their Track, or CSs end before it is tracked
// at all: the copier's submission window (internal/copier/window.go)
// bounds both.
//
// An idle actor keeps up to n retired tickets referenced here only until
// they are retired (drop) or the actor exits (clear).
type horizon struct {
	slots []atomic.Pointer[Ticket]
	polls atomic.Uint64 // tickets polled by a Track (ActorStats.HorizonPolls)
}

func newHorizon(n int) horizon {
	if n <= 0 {
		return horizon{}
	}
	return horizon{slots: make([]atomic.Pointer[Ticket], 1<<bits.Len(uint(n-1)))}
}

func (h *horizon) slot(seq uint64) *atomic.Pointer[Ticket] {
	return &h.slots[seq&uint64(len(h.slots)-1)]
}

// pass records t, just tracked, and polls the submission it displaces
// (n sequence numbers before it) if that one is not retired. When t is
// the older of the two (its Track came late), t is polled instead and
// the newer one stays.
func (h *horizon) pass(t *Ticket) {
	if len(h.slots) == 0 {
		return
	}
	s := h.slot(t.Seq)
	old := s.Swap(t)
	// One retired before it got here (by its Track at its deadline
	// while it waited for room, or by the actor or a waiter) had nothing
	// to forget then (drop): forget it now, else the slot kept it, also
	// after the actor exited. Looked at after the Swap: one retired
	// later finds itself here and drops itself.
	defer func() {
		if t.Retired() {
			s.CompareAndSwap(t, nil)
		}
	}()
	if old == nil || old == t || old.Retired() {
		return
	}
	if old.Seq > t.Seq {
		s.CompareAndSwap(t, old)
		old = t
	}
	h.polls.Add(1)
	old.Poll()
}

// drop forgets t, retired (its slot may hold a later one already).
func (h *horizon) drop(t *Ticket) {
	if len(h.slots) != 0 {
		h.slot(t.Seq).CompareAndSwap(t, nil)
	}
}

// clear forgets every ticket (the actor exited).
func (h *horizon) clear() {
	for i := range h.slots {
		h.slots[i].Store(nil)
	}
}
