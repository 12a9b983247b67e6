package rdma

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSlotTable(t *testing.T) {
	tb := newSlotTable(4)
	qp1, qp2 := &QP{}, &QP{}
	ids := make([]uint64, 3)
	require.True(t, tb.alloc([]slotRec{{qp: qp1, op: OpWrite}, {qp: qp1, op: OpRead}, {qp: qp2, op: OpRecv}}, ids))
	assert.Equal(t, 3, tb.inUse())
	for i, id := range ids {
		idx, gen := splitID(id)
		assert.Equal(t, uint32(i), idx)
		assert.Equal(t, uint16(1), gen)
	}
	// All or nothing.
	require.False(t, tb.alloc(make([]slotRec, 2), make([]uint64, 2)))
	assert.Equal(t, 3, tb.inUse())

	tb.mu.Lock()
	r, ok := tb.takeLocked(ids[1])
	tb.mu.Unlock()
	require.True(t, ok)
	assert.Equal(t, OpRead, r.op)
	assert.Same(t, qp1, r.qp)

	// A second completion for the same wr_id is stray.
	tb.mu.Lock()
	_, ok = tb.takeLocked(ids[1])
	tb.mu.Unlock()
	assert.False(t, ok)

	// The slot is reused with a new generation; the old wr_id stays stray.
	id2 := make([]uint64, 1)
	require.True(t, tb.alloc([]slotRec{{qp: qp2, op: OpSend}}, id2))
	idx, gen := splitID(id2[0])
	assert.Equal(t, uint32(1), idx)
	assert.Equal(t, uint16(2), gen)
	tb.mu.Lock()
	_, ok = tb.takeLocked(ids[1])
	tb.mu.Unlock()
	assert.False(t, ok, "old generation")
	tb.mu.Lock()
	_, ok = tb.takeLocked(wrID(999, 1))
	tb.mu.Unlock()
	assert.False(t, ok, "index out of range")

	// Sweep takes every slot of one QP.
	recs := tb.sweep(qp2)
	assert.Len(t, recs, 2)
	assert.Equal(t, 1, tb.inUse())
	tb.release(ids[:1])
	assert.Equal(t, 0, tb.inUse())
}

func TestSlotGenerationWraps(t *testing.T) {
	tb := newSlotTable(1)
	tb.slots[0].gen = 0xfffe
	id := make([]uint64, 1)
	var gens []uint16
	for i := 0; i < 3; i++ {
		require.True(t, tb.alloc([]slotRec{{op: OpWrite}}, id))
		_, gen := splitID(id[0])
		gens = append(gens, gen)
		tb.release(id)
	}
	assert.Equal(t, []uint16{0xffff, 1, 2}, gens, "generation 0 is skipped")
}

// TestCQConfigBatchBounds: NewCQ allocates Batch completion records up
// front, so a huge Batch (with a Size to match, on a device that reports
// no CQ size limit) must not reach make: it is clamped to MaxCQBatch.
func TestCQConfigBatchBounds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size, batch int
		want        int
	}{
		{"defaults", 0, 0, 64},
		{"at most Size", 16, 64, 16},
		{"huge", 1 << 40, 1 << 40, MaxCQBatch},
		{"at the bound", 1 << 20, MaxCQBatch, MaxCQBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := CQConfig{Size: tc.size, Batch: tc.batch}
			c.defaults()
			require.Equal(t, tc.want, c.Batch)
		})
	}
}
