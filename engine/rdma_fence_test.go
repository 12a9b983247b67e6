package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRDMAFenceKeptAfterFailedSend: a Send whose ctx ends while its fence
// waits for a send credit (the queue pair's send queue full) posts no
// READ and fails; the writes it did not fence must still be fenced by the
// next Send, or its message could reach the peer before their bytes.
func TestRDMAFenceKeptAfterFailedSend(t *testing.T) {
	needRDMA(t)
	owner, req, ab, ba := rdmaAccepted(t)
	ctx := context.Background()
	src, err := req.Alloc(4096, Host)
	require.NoError(t, err)
	fill(src.Bytes(), 5)
	_, rk := exported(t, owner, 4096, Host)

	w0 := wrsPosted(ab)
	require.NoError(t, ab.PutSync(ctx, src.All(), rk))
	release := rdmaPath(ab).HoldCredits() // as if the send queue were full
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = ab.Send(short, []byte("not sent"))
	cancel()
	release()
	require.ErrorIs(t, err, ErrTimeout)
	require.Equal(t, w0+1, wrsPosted(ab), "no fence posted")

	require.NoError(t, ab.Send(ctx, []byte("sent")))
	require.Equal(t, w0+2, wrsPosted(ab), "the next Send fences the write")
	m, err := ba.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, "sent", string(m))
	require.NoError(t, ab.Err())
}

// TestCloseWaitsForSendFence: Engine.Close waits for a Send's fence under
// way (the RDMA read behind the writes, which holds the transport's
// scratch buffer and a memory region) before it closes the transports;
// the fence passes the starts gate, and its hook parks it here.
func TestCloseWaitsForSendFence(t *testing.T) {
	needRDMA(t)
	owner, req, ab, _ := rdmaAccepted(t)
	ctx := context.Background()
	src, err := req.Alloc(4096, Host)
	require.NoError(t, err)
	_, rk := exported(t, owner, 4096, Host)
	require.NoError(t, ab.PutSync(ctx, src.All(), rk)) // a write the next Send fences
	parked, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	park := func() { once.Do(func() { close(parked); <-resume }) }
	req.starts.SetHook(&park)
	do := func() error {
		err := ab.Send(ctx, []byte("fenced"))
		if errors.Is(err, ErrPeer) {
			return nil // the connection Close tore down
		}
		return err
	}
	require.True(t, closeWhileParked(t, req, do, parked, resume), "Close returned while a Send's fence was starting")
}
