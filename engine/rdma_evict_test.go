package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRDMAPeerIdleEvictSparesUse: an RDMA peer that keeps writing into
// the listener's host memory with one-sided RDMA (no frame reaches the
// listener) is busy: its heartbeats report its use (wire.CapUseReport),
// so at MaxPeers a newcomer is refused with ErrTooManyPeers long after
// PeerIdleEvict, and the peer's Puts all succeed. Needs an RDMA device
// (the Soft-RoCE VM: testbed/rxe).
func TestRDMAPeerIdleEvictSparesUse(t *testing.T) {
	needRDMA(t)
	ctx := context.Background()
	const idle = time.Second
	// Heartbeats (and the dialer's report of its use) each 250 ms.
	ocfg, rcfg := rdmaTestConfig(), rdmaTestConfig()
	ocfg.MaxPeers, ocfg.PeerIdleEvict, ocfg.PeerTimeout = 1, idle, time.Second
	rcfg.PeerTimeout = time.Second
	owner, req := newEngine(t, ocfg), newEngine(t, rcfg)
	require.True(t, owner.RDMA().Available && req.RDMA().Available, "RDMA unavailable: %s", owner.RDMA().Reason)
	other := newEngine(t, Config{Devices: DevicesNone})
	ep, l := dialRDMA(t, owner, req)
	defer l.Close()
	defer ep.Close()
	dst, err := owner.Alloc(4096, Host)
	require.NoError(t, err)
	k, err := dst.Export()
	require.NoError(t, err)
	require.NotZero(t, k.k.RKey, "a host key carries its rkey: Puts are one-sided")
	src, err := req.Alloc(4096, Host)
	require.NoError(t, err)

	var stop atomic.Bool
	var puts int
	var putErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if putErr = ep.PutSync(ctx, src.All(), k); putErr != nil {
				return
			}
			puts++
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(3 * idle) // idle for PeerIdleEvict twice over, were the Puts not seen
	_, err = other.Dial(ctx, "tcp", l.Addr())
	stop.Store(true)
	wg.Wait()
	require.ErrorIs(t, err, ErrTooManyPeers)
	require.NoError(t, putErr)
	require.NoError(t, ep.Err())
	require.Positive(t, puts)
}
