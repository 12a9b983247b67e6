package rdma_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/verbs"
	"github.com/gxfer/gxfer/rdma"
)

// TestPostPrepared posts prepared writes and reads again and again: each
// carries the bytes its buffer holds at that post, and completes once.
func TestPostPrepared(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   uint64
		inline bool
	}{
		{"write", 4096, false},
		{"inline write", 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, rdma.CQConfig{})
			a, _ := e.pair(t)
			m := e.mem(t, 3*4096)
			col := newCollector(8)
			w, err := a.Prepare(rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, tc.size)}, Remote: m.mr.Remote().At(4096), Inline: tc.inline, Done: col})
			require.NoError(t, err)
			r, err := a.Prepare(rdma.WR{Op: rdma.OpRead, Local: []rdma.Seg{m.mr.Seg(8192, tc.size)}, Remote: m.mr.Remote().At(4096), Done: col})
			require.NoError(t, err)
			for seed := range byte(3) {
				fill(m.b[:tc.size], seed)
				require.NoError(t, a.PostPrepared(w))
				c := col.wait(t, 1)[0]
				require.NoError(t, c.Err)
				assert.Equal(t, rdma.OpWrite, c.Op)
				require.Equal(t, m.b[:tc.size], m.b[4096:4096+tc.size], "post %d", seed)
				clear(m.b[8192:])
				require.NoError(t, a.PostPrepared(r))
				c = col.wait(t, 1)[0]
				require.NoError(t, c.Err)
				assert.Equal(t, rdma.OpRead, c.Op)
				require.Equal(t, m.b[:tc.size], m.b[8192:8192+tc.size], "read %d", seed)
			}
			requireNoOutstanding(t, a)
		})
	}
}

// TestPrepareRefuses: Prepare checks what Post checks, and PostPrepared
// refuses a work request prepared on another QP, a full send queue and a
// closed QP or a freed request, posting nothing; Free and the QP's Close
// free its C memory once.
func TestPrepareRefuses(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{Manual: true})
	cfg := e.qpConfig()
	cfg.MaxSend = 2
	a, b := e.pairWith(t, cfg)
	m := e.mem(t, 8192)
	for _, w := range []rdma.WR{
		{Op: rdma.OpRead, Inline: true, Local: []rdma.Seg{m.mr.Seg(0, 8)}, Remote: m.mr.Remote().At(4096)},
		{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(8190, 8)}, Remote: m.mr.Remote().At(0)},
		{Op: rdma.OpWrite, Inline: true, Local: []rdma.Seg{m.mr.Seg(0, 65)}, Remote: m.mr.Remote().At(4096)},
		{Op: rdma.OpRecv, Local: []rdma.Seg{m.mr.Seg(0, 8)}},
	} {
		_, err := a.Prepare(w)
		require.ErrorIs(t, err, rdma.ErrInvalid, "%+v", w)
	}
	col := newCollector(4)
	w, err := a.Prepare(rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 8)}, Remote: m.mr.Remote().At(4096), Done: col})
	require.NoError(t, err)
	require.ErrorIs(t, b.PostPrepared(w), rdma.ErrInvalid, "prepared on another QP")
	require.ErrorIs(t, a.PostPrepared(nil), rdma.ErrInvalid)
	require.NoError(t, a.PostPrepared(w))
	require.NoError(t, a.PostPrepared(w))
	require.ErrorIs(t, a.PostPrepared(w), rdma.ErrQueueFull, "a send queue of 2, none polled")
	deadline := time.Now().Add(30 * time.Second)
	for len(col) < 2 && time.Now().Before(deadline) {
		e.cq.Progress()
	}
	for _, c := range col.wait(t, 2) {
		require.NoError(t, c.Err)
	}
	require.NoError(t, a.PostPrepared(w), "room again")
	for len(col) < 1 && time.Now().Before(deadline) {
		e.cq.Progress()
	}
	require.NoError(t, col.wait(t, 1)[0].Err)

	// Freed: its C memory goes once, and a post of it is ErrClosed.
	live := verbs.Live().PreparedSends
	f, err := a.Prepare(rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 8)}, Remote: m.mr.Remote().At(4096), Done: col})
	require.NoError(t, err)
	require.Equal(t, live+1, verbs.Live().PreparedSends)
	f.Free()
	f.Free()
	require.Equal(t, live, verbs.Live().PreparedSends)
	require.ErrorIs(t, a.PostPrepared(f), rdma.ErrClosed)

	// Closed: w's C memory goes with the QP, and nothing is posted.
	require.NoError(t, a.Close())
	require.Equal(t, live-1, verbs.Live().PreparedSends)
	require.ErrorIs(t, a.PostPrepared(w), rdma.ErrClosed)
	w.Free()
	require.Equal(t, live-1, verbs.Live().PreparedSends)
	_, err = a.Prepare(rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 8)}, Remote: m.mr.Remote().At(4096), Done: col})
	require.ErrorIs(t, err, rdma.ErrClosed)
	assert.Empty(t, col, "nothing posted after Close")
}
