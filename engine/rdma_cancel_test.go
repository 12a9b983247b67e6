package engine

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRDMACancelStaged: cancelling the ctx of a large Put staged through
// host memory (local Gaudi memory without a DMA-BUF region) stops the
// chunks not yet started; the future resolves with ErrCanceled once those
// started have ended (nothing is posted after it), and the endpoint goes
// on.
func TestRDMACancelStaged(t *testing.T) {
	needRDMA(t)
	owner, req, ep, _ := rdmaPair(t)
	const n = 64 << 20 // 64 chunks: hundreds of milliseconds on Soft-RoCE
	theirs, err := owner.Alloc(n, Host)
	require.NoError(t, err)
	tk, err := theirs.Export()
	require.NoError(t, err)
	mine, err := req.Alloc(n, Gaudi(0))
	require.NoError(t, err)
	if req.RDMA().DMABuf == "supported" {
		t.Skip("the NIC registers Gaudi memory: nothing is staged")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := ep.Stats().NICWRs[0]
	f := ep.Put(ctx, mine.All(), tk)
	require.Eventually(t, func() bool { return ep.Stats().NICWRs[0] > before || f.IsDone() }, 30*time.Second, 100*time.Microsecond)
	cancel()
	<-f.Done()
	require.ErrorIs(t, f.Err(), ErrCanceled)
	posted := ep.Stats().NICWRs[0] - before
	t.Logf("%d of %d chunks posted before the cancellation took effect", posted, n>>20)
	require.Less(t, posted, uint64(n>>20), "chunks were posted after the cancellation")
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, posted, ep.Stats().NICWRs[0]-before, "a chunk was posted after the future resolved")
	require.Zero(t, req.Stats().InFlight, "a staging DMA still runs")
	require.NoError(t, ep.Err())
	require.NoError(t, mine.Free())

	small, err := req.Alloc(1<<20, Host)
	require.NoError(t, err)
	fill(small.Bytes(), 4)
	require.NoError(t, ep.PutSync(context.Background(), small.All(), tk.Slice(0, 1<<20)))
	require.True(t, bytes.Equal(small.Bytes(), theirs.Bytes()[:1<<20]))
}

// TestRDMACancelDelegated: the ctx of a Put the owner performs (into its
// Gaudi memory, which has no rkey) ends while the owner is moving data
// against our region: the future resolves with ErrCanceled only once the
// owner has answered; an owner silent for PeerTimeout after that fails
// the endpoint first, and the region is deregistered, out of its reach.
func TestRDMACancelDelegated(t *testing.T) {
	needRDMA(t)
	for _, answers := range []bool{true, false} {
		name := map[bool]string{true: "the owner answers", false: "the owner is silent"}[answers]
		t.Run(name, func(t *testing.T) {
			entered, release := make(chan struct{}, 1), make(chan struct{})
			ocfg := rdmaTestConfig()
			ocfg.PeerTimeout = time.Second
			owner := newEngine(t, ocfg)
			owner.rdma.SetServeHook(func() {
				entered <- struct{}{}
				<-release
			})
			defer close(release) // before the engines' Close (cleanups run after)
			rcfg := rdmaTestConfig()
			rcfg.PeerTimeout = time.Second
			req := newEngine(t, rcfg)
			ep, _ := dialRDMA(t, owner, req)

			dev, err := owner.Alloc(1<<20, Gaudi(0))
			require.NoError(t, err)
			dk, err := dev.Export()
			require.NoError(t, err)
			require.Zero(t, dk.k.RKey, "Gaudi memory without a DMA-BUF region: delegated")
			src, err := req.Alloc(1<<20, Host)
			require.NoError(t, err)
			mrs := req.rdma.Devices()[0].Counts().MRs
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := ep.Put(ctx, src.All(), dk)
			<-entered // the request is out: the owner may move data from our region
			cancel()
			time.Sleep(200 * time.Millisecond)
			require.False(t, f.IsDone(), "resolved while the owner could still reach the region")
			require.Equal(t, mrs+1, req.rdma.Devices()[0].Counts().MRs, "the region stays registered")
			if answers {
				release <- struct{}{}
			}
			select {
			case <-f.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the future did not resolve")
			}
			require.ErrorIs(t, f.Err(), ErrCanceled)
			req.async.Wait() // the request's goroutine has ended
			require.Equal(t, mrs, req.rdma.Devices()[0].Counts().MRs, "the region is deregistered")
			if answers {
				require.NoError(t, ep.Err())
				return
			}
			require.ErrorIs(t, ep.Err(), ErrPeer)
			require.Contains(t, ep.Err().Error(), "no answer to delegated RDMA request")
		})
	}
}
