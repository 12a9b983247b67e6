package tcp

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/wire"
)

// TestPeerPutsDoNotRefuseOurGets: MaxInbound bounds the transfers a peer
// has in progress toward us, not this side's own Gets (the request slots
// bound those). A peer holding MaxInbound Puts open (requests sent, bytes
// never) used to make every Get of this side fail with an untyped "more
// than 4096 transfers in progress" instead of being sent.
func TestPeerPutsDoNotRefuseOurGets(t *testing.T) {
	f, raw := rawPeer(t, false, 1<<20)
	for i := range MaxInbound {
		put := &wire.Put{Request: wire.Request{RequestID: uint64(2*i + 1), Key: hostKey(1), Length: 1, Local: wire.Local{Kind: wire.LocalInline}}}
		require.NoError(t, raw.Send(put))
	}
	// A refused Put with no bytes: its Error says the reader has taken
	// every Put before it.
	bad := hostKey(1)
	bad.AllocID = badAlloc
	require.NoError(t, raw.Send(&wire.Put{Request: wire.Request{RequestID: 2*MaxInbound + 1, Key: bad, Local: wire.Local{Kind: wire.LocalInline}}}))
	require.Equal(t, uint64(2*MaxInbound+1), recvMsg[*wire.Error](t, raw).RequestID)

	dst := &hostBuf{mem: make([]byte, 8)}
	c := newCompletion()
	f.path.Start(context.Background(), datapath.Req{Local: datapath.Mem{B: dst, Len: 8}, Key: hostKey(8)}, c)
	select {
	case <-c.done: // (nothing answers it before the Get below is read)
		t.Fatalf("the Get ended before it was sent: %v", c.err)
	default:
	}
	get := recvMsg[*wire.Get](t, raw)
	require.NoError(t, raw.SendData(get.RequestID, 0, []byte("our get!")))
	require.NoError(t, raw.Send(&wire.Completion{RequestID: get.RequestID, Status: wire.StatusOK}))
	require.NoError(t, c.wait(t))
	require.Equal(t, "our get!", string(dst.mem))
}
