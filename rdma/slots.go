package rdma

import (
	"sync"
	"sync/atomic"
)

// A work request's wr_id is its slot index in the CQ's table shifted left
// 16 bits, ORed with the slot's 16-bit generation. A completion whose
// generation does not match (a late completion for a slot that was swept
// and reused) is counted as stray and dropped.
const genBits = 16

// slotRec is what a completion needs to find its way back.
type slotRec struct {
	done Completer
	qp   *QP
	op   OpKind
}

type slot struct {
	slotRec
	gen  uint16
	used bool
}

// slotTable maps wr_ids to in-flight work requests. Allocation and release
// take the mutex once per batch.
type slotTable struct {
	mu    sync.Mutex
	slots []slot
	free  []uint32     // stack of free indices
	used  atomic.Int64 // slots in flight (changed under mu, read without)
}

func newSlotTable(n int) *slotTable {
	t := &slotTable{slots: make([]slot, n), free: make([]uint32, n)}
	for i := range t.free {
		t.free[i] = uint32(n - 1 - i) // pop order 0, 1, 2, ...
	}
	return t
}

func wrID(idx uint32, gen uint16) uint64 { return uint64(idx)<<genBits | uint64(gen) }

func splitID(id uint64) (uint32, uint16) { return uint32(id >> genBits), uint16(id) }

// alloc takes len(recs) slots, all or none, and writes their wr_ids to ids.
func (t *slotTable) alloc(recs []slotRec, ids []uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(recs) > len(t.free) {
		return false
	}
	for i := range recs {
		idx := t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
		s := &t.slots[idx]
		s.gen++
		if s.gen == 0 {
			s.gen = 1
		}
		s.used = true
		s.slotRec = recs[i]
		ids[i] = wrID(idx, s.gen)
	}
	t.used.Add(int64(len(recs)))
	return true
}

// release frees slots whose work requests were never posted.
func (t *slotTable) release(ids []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		t.takeLocked(id)
	}
}

// takeLocked frees the slot for id and returns its record; false if id is
// not in flight (stray).
func (t *slotTable) takeLocked(id uint64) (slotRec, bool) {
	idx, gen := splitID(id)
	if int(idx) >= len(t.slots) {
		return slotRec{}, false
	}
	s := &t.slots[idx]
	if !s.used || s.gen != gen {
		return slotRec{}, false
	}
	r := s.slotRec
	s.slotRec = slotRec{}
	s.used = false
	t.free = append(t.free, idx)
	t.used.Add(-1)
	return r, true
}

// sweep frees every slot of qp and returns their records.
func (t *slotTable) sweep(qp *QP) []slotRec {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []slotRec
	for i := range t.slots {
		s := &t.slots[i]
		if s.used && s.qp == qp {
			out = append(out, s.slotRec)
			s.slotRec = slotRec{}
			s.used = false
			t.free = append(t.free, uint32(i))
			t.used.Add(-1)
		}
	}
	return out
}

// inUse is the number of slots in flight.
func (t *slotTable) inUse() int { return int(t.used.Load()) }
