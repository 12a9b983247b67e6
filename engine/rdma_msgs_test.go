package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// wrsPosted is the work requests ep posted over all its queue pairs.
func wrsPosted(ep *Endpoint) uint64 {
	var n uint64
	for _, w := range ep.Stats().NICWRs {
		n += w
	}
	return n
}

// TestRDMAFence: a Send after an RDMA Put first fences the queue pair that
// wrote (one RDMA read behind the write), once: a second Send, or a Send
// after a Get, posts nothing; the message arrives after the bytes.
func TestRDMAFence(t *testing.T) {
	needRDMA(t)
	owner, req, ab, ba := rdmaAccepted(t)
	ctx := context.Background()
	src, err := req.Alloc(4096, Host)
	require.NoError(t, err)
	fill(src.Bytes(), 11)
	rb, rk := exported(t, owner, 4096, Host)

	w0 := wrsPosted(ab)
	require.NoError(t, ab.PutSync(ctx, src.All(), rk))
	require.Equal(t, w0+1, wrsPosted(ab), "one write")
	require.NoError(t, ab.Send(ctx, []byte("written")))
	require.Equal(t, w0+2, wrsPosted(ab), "the fence: one read")
	m, err := ba.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, "written", string(m))
	require.True(t, bytes.Equal(src.Bytes(), rb.Bytes()))

	require.NoError(t, ab.Send(ctx, []byte("again")))
	require.Equal(t, w0+2, wrsPosted(ab), "nothing written since the last fence")
	require.NoError(t, ab.GetSync(ctx, src.All(), rk))
	require.NoError(t, ab.Send(ctx, []byte("after a get")))
	require.Equal(t, w0+3, wrsPosted(ab), "a Get needs no fence")
	for range 2 {
		_, err := ba.Recv(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, ab.Err())
}

// TestRDMADelegatedGetFenced: the owner serving a delegated Get (its Gaudi
// memory has no rkey on Soft-RoCE) writes into the requester's region and,
// before answering, fences those writes with one RDMA read behind them on
// the same queue pair: the requester reads its region as soon as the
// answer arrives. A delegated Put (the owner reads) needs none.
func TestRDMADelegatedGetFenced(t *testing.T) {
	needRDMA(t)
	owner, req, ab, ba := rdmaAccepted(t)
	ctx := context.Background()
	dev, err := owner.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	dk, err := dev.Export()
	require.NoError(t, err)
	require.Zero(t, dk.k.RKey, "Soft-RoCE: the peer's Gaudi memory is reached by delegation")
	mine, err := req.Alloc(1<<20, Host)
	require.NoError(t, err)
	fill(mine.Bytes(), 23)

	w0 := wrsPosted(ba)
	require.NoError(t, ab.PutSync(ctx, mine.All(), dk))
	reads := wrsPosted(ba) - w0
	require.NotZero(t, reads, "the owner read the requester's region")
	clear(mine.Bytes())
	w1 := wrsPosted(ba)
	require.NoError(t, ab.GetSync(ctx, mine.All(), dk))
	require.Equal(t, reads+1, wrsPosted(ba)-w1, "as many writes as the Put's reads, and the fence's read")
	want := make([]byte, 1<<20)
	fill(want, 23)
	require.True(t, bytes.Equal(want, mine.Bytes()))
	require.Equal(t, uint64(2), ab.Stats().Delegated)
}
