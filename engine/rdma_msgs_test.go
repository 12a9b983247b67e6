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
	owner, req, ab, l := rdmaPair(t)
	defer l.Close()
	ba, err := l.Accept(context.Background())
	require.NoError(t, err)
	defer ba.Close()
	defer ab.Close()
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
