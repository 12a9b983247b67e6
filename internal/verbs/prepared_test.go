package verbs_test

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/verbs"
)

// TestPreparedSend posts prepared work requests (a write of two SGEs, an
// inline write, a read) again and again with new wr_ids: each post
// carries the buffer's bytes of that moment and completes with its own
// wr_id. Then what a prepared request refuses, and its C memory freed by
// Free or by the QP's Close.
func TestPreparedSend(t *testing.T) {
	p := newPair(t, device(t))
	p.connect(t)
	base := uint64(addr(p.buf))
	lkey, rkey := p.mr.LKey(), p.mr.RKey()
	before := verbs.Live().PreparedSends

	w, err := p.a.PrepareSend(verbs.SendWR{ID: 99, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGE: []verbs.SGE{{Addr: base, Length: 40, LKey: lkey}, {Addr: base + 100, Length: 24, LKey: lkey}}, RemoteAddr: base + 8192, RKey: rkey})
	require.NoError(t, err)
	in, err := p.a.PrepareSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline,
		SGE: []verbs.SGE{{Addr: base + 200, Length: 8, LKey: lkey}}, RemoteAddr: base + 12288, RKey: rkey})
	require.NoError(t, err)
	r, err := p.a.PrepareSend(verbs.SendWR{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGE: []verbs.SGE{{Addr: base + 16384, Length: 64, LKey: lkey}}, RemoteAddr: base + 8192, RKey: rkey})
	require.NoError(t, err)
	require.Equal(t, before+3, verbs.Live().PreparedSends)

	for round := range 3 {
		for i := range 256 {
			p.buf[i] = byte(i + 31*round)
		}
		id := uint64(1000 + 10*round)
		require.NoError(t, p.a.PostPrepared(w, id))
		require.NoError(t, p.a.PostPrepared(in, id+1))
		got := pollN(t, p.cq, 2)
		ids := map[uint64]verbs.WCOpcode{}
		for _, c := range got {
			require.Equal(t, verbs.WCSuccess, c.Status, c.Status.String())
			ids[c.ID] = c.Opcode
		}
		require.Equal(t, map[uint64]verbs.WCOpcode{id: verbs.WCRDMAWrite, id + 1: verbs.WCRDMAWrite}, ids, "round %d", round)
		require.Equal(t, p.buf[:40], p.buf[8192:8192+40], "round %d: first SGE", round)
		require.Equal(t, p.buf[100:124], p.buf[8192+40:8192+64], "round %d: second SGE", round)
		require.Equal(t, p.buf[200:208], p.buf[12288:12288+8], "round %d: inline", round)
		require.NoError(t, p.a.PostPrepared(r, id+2))
		c := pollN(t, p.cq, 1)[0]
		require.Equal(t, id+2, c.ID)
		require.Equal(t, verbs.WCRDMARead, c.Opcode)
		require.Equal(t, p.buf[8192:8192+64], p.buf[16384:16384+64], "round %d: read", round)
	}

	// Refused: too many SGEs; a request prepared on another QP, or none.
	_, err = p.a.PrepareSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGE: make([]verbs.SGE, 3)})
	assert.ErrorIs(t, err, syscall.EINVAL)
	assert.ErrorIs(t, p.b.PostPrepared(w, 1), syscall.EINVAL)
	assert.ErrorIs(t, p.a.PostPrepared(nil, 1), syscall.EINVAL)

	// Free: the memory goes once, a post after it is ErrClosed.
	r.Free()
	r.Free()
	assert.Equal(t, before+2, verbs.Live().PreparedSends)
	assert.ErrorIs(t, p.a.PostPrepared(r, 1), verbs.ErrClosed)

	// The QP's Close frees those left; Free and posts after it change
	// nothing and fail.
	require.NoError(t, p.a.Close())
	assert.Equal(t, before, verbs.Live().PreparedSends)
	w.Free()
	assert.Equal(t, before, verbs.Live().PreparedSends)
	assert.ErrorIs(t, p.a.PostPrepared(in, 1), verbs.ErrClosed)
	_, err = p.a.PrepareSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite})
	assert.ErrorIs(t, err, verbs.ErrClosed)
}
