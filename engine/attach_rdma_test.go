package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/datapath/rdmapath"
)

// TestRDMAAttachedDMABuf runs in the Soft-RoCE VM (testbed/rxe): a put from
// runtime memory attempts ibv_reg_dmabuf_mr on the pool's DMA-BUF at the
// buffer's offset; Soft-RoCE cannot register DMA-BUF memory (and the
// emulator's export is a memfd, not a dma-buf), so the transfer is staged
// through host memory by the runtime's copier, with no CS of gxfer's own.
func TestRDMAAttachedDMABuf(t *testing.T) {
	needRDMA(t)
	owner := newRDMAEngine(t)
	cfg := rdmaTestConfig()
	cfg.Devices = DevicesNone
	req := newEngine(t, cfg)
	require.True(t, req.RDMA().Available, req.RDMA().Reason)
	req.rdma.SetTryDMABuf(true) // attempt the registration whatever the probe said

	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 256 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	rt, err := sim.NewRuntime(hlsim.RuntimeConfig{PoolSize: 32 << 20, PoolOffset: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	a, err := req.Attach(AttachConfig{Target: rt.Target(), Anchor: rt.Anchor(), Copier: rt})
	require.NoError(t, err)

	ep, _ := dialRDMA(t, owner, req)
	ctx := context.Background()
	const n = 3<<20 + 1
	dev, err := a.Register(rt.Anchor().PoolStart+4096, n)
	require.NoError(t, err)
	want := make([]byte, n)
	fill(want, 9)
	require.NoError(t, rt.CopyHostToDevice(ctx, dev.Addr(), want))
	theirs, err := owner.Alloc(n, Host)
	require.NoError(t, err)
	tk, err := theirs.Export()
	require.NoError(t, err)
	require.NoError(t, ep.PutSync(ctx, dev.All(), tk))
	require.True(t, bytes.Equal(want, theirs.Bytes()))

	info := req.RDMA()
	t.Logf("DMA-BUF: %s; region error: %v", info.DMABuf, rdmapath.RegionErr(dev.dp()))
	require.EqualValues(t, 1, info.DMABufAttempts, "ibv_reg_dmabuf_mr attempted on the pool's DMA-BUF")
	if info.DMABufMRs == 0 {
		require.Error(t, rdmapath.RegionErr(dev.dp()))
		require.NotZero(t, ep.Stats().Staged, "staged through host memory")
		require.NotZero(t, a.Stats().Copies, "by the runtime's copier")
	}
	st := rt.Stats()
	require.Zero(t, st.LentCS)
	require.Zero(t, st.LentCloses)
	require.Zero(t, sim.Stats().CSSubmitted)
	require.NoError(t, a.Detach(), "before the runtime unmaps its pool (Cleanup order)")
}
