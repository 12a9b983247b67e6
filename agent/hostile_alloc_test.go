package agent

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// TestHostileServerClaimedRecordSize: an acceptor whose first metadata
// chunk claims a record of meta.MaxRecord bytes and carries one byte
// costs the dialer memory for the bytes it sent, not for the size it
// claimed. The dialer used to allocate the whole claimed record (8 MiB)
// per handshake, for a 13-byte message.
func TestHostileServerClaimedRecordSize(t *testing.T) {
	chunk := func(total, off uint32, data []byte) []byte {
		b := header(msgMetaChunk, 8+len(data))
		b = binary.LittleEndian.AppendUint32(b, total)
		b = binary.LittleEndian.AppendUint32(b, off)
		return append(b, data...)
	}
	hello := encodeHello("m", 7, 0, 1, false)
	ctx := testCtx(t)
	ea, em := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	l, err := em.Listen("unix", sockDir(t)+"/m.sock")
	require.NoError(t, err)
	defer l.Close()
	const rounds = 4
	// allocated is the bytes allocated by rounds handshakes with a peer
	// that answers reply.
	allocated := func(reply [][]byte) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range rounds {
			done := scriptedPeer(ctx, l, reply, nil)
			_, err := a.Connect(ctx, l.Addr())
			require.ErrorIs(t, err, engine.ErrPeer)
			require.NoError(t, <-done)
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	// The same handshakes, without the chunk, measure what the rest
	// allocates (engine endpoints, buffers): the chunk may add little.
	_ = allocated([][]byte{hello, encodeRefuse("no")}) // warm up
	base := allocated([][]byte{hello, encodeRefuse("no")})
	claimed := allocated([][]byte{hello, chunk(meta.MaxRecord, 0, []byte{1}), encodeRefuse("no")})
	t.Logf("per handshake: %d bytes, %d with the claim", base/rounds, claimed/rounds)
	require.Less(t, claimed, base+rounds*meta.MaxRecord/8,
		"a 13-byte chunk claiming %d bytes allocated them", meta.MaxRecord)
}
