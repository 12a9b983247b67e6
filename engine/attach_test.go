package engine

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// attached is an engine attached to an emulated runtime.
type attached struct {
	sim *hlsim.Device
	rt  *hlsim.Runtime
	e   *Engine
	a   *Attachment
}

// emulatedRuntime is an emulated Gaudi2 (uAPI of kernel) with the
// emulated runtime rc on it; both close with the test.
func emulatedRuntime(t *testing.T, kernel string, rc hlsim.RuntimeConfig) (*hlsim.Device, *hlsim.Runtime) {
	t.Helper()
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 256 << 20, Kernel: kernel})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	rt, err := sim.NewRuntime(rc)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	return sim, rt
}

func newAttached(t *testing.T, kernel string, poolOffset uint64, copier bool) *attached {
	t.Helper()
	sim, rt := emulatedRuntime(t, kernel, hlsim.RuntimeConfig{PoolSize: 32 << 20, PoolOffset: poolOffset})
	// The engine opens no device of its own: the runtime holds the only one.
	e := newEngine(t, Config{Devices: DevicesNone, RDMA: RDMAConfig{Disabled: true}})
	cfg := AttachConfig{Target: rt.Target(), Anchor: rt.Anchor()}
	if copier {
		cfg.Copier = rt
	}
	a, err := e.Attach(cfg)
	require.NoError(t, err)
	return &attached{sim: sim, rt: rt, e: e, a: a}
}

// requireNoCS checks, from the emulator's own counters, that gxfer made
// no command submission and never closed the runtime's context.
func (x *attached) requireNoCS(t *testing.T) {
	t.Helper()
	st := x.rt.Stats()
	require.Zero(t, st.LentCS, "CS/WAIT_CS/CB ioctls through the borrowed fd")
	require.Zero(t, st.LentMemOps, "ALLOC/FREE/MAP/UNMAP through the borrowed fd")
	require.Zero(t, st.LentCloses, "Close of the borrowed fd")
	require.Zero(t, x.sim.Stats().CSSubmitted, "CSs the device saw")
	require.NoError(t, x.rt.Usable())
}

func TestAttachCopyUsesTheCopier(t *testing.T) {
	x := newAttached(t, "6.8", 1<<20+512, true)
	ctx := context.Background()
	base := x.rt.Anchor().PoolStart
	const n = 3<<20 + 17
	dev, err := x.a.Register(base+4096+3, n)
	require.NoError(t, err)
	dev2, err := x.a.Register(base+8<<20, n)
	require.NoError(t, err)
	require.Equal(t, base+4096+3, dev.Addr())
	require.True(t, dev.Location().IsGaudi())
	require.Equal(t, "attached0", dev.Location().String())

	src, err := x.e.Alloc(n, Host)
	require.NoError(t, err)
	dst, err := x.e.Alloc(n, Host)
	require.NoError(t, err)
	fill(src.Bytes(), 7)
	require.NoError(t, x.e.CopySync(ctx, dev.All(), src.All()))
	require.NoError(t, x.e.CopySync(ctx, dev2.All(), dev.All()))
	require.NoError(t, x.e.CopySync(ctx, dst.All(), dev2.All()))
	require.True(t, bytes.Equal(src.Bytes(), dst.Bytes()))

	require.EqualValues(t, 3, x.a.Stats().Copies)
	require.EqualValues(t, 3, x.rt.Stats().Copies, "the runtime made the copies")
	x.requireNoCS(t)

	// Batches do not take runtime memory (typed error, nothing submitted).
	b := x.e.NewBatch()
	b.Copy(dev.All(), src.All())
	require.ErrorIs(t, b.Submit(ctx).Wait(ctx), ErrNotSupported)
}

func TestAttachWithoutCopier(t *testing.T) {
	x := newAttached(t, "6.8", 0, false)
	ctx := context.Background()
	dev, err := x.a.Register(x.rt.Anchor().PoolStart, 4096)
	require.NoError(t, err)
	host, err := x.e.Alloc(4096, Host)
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		dst, src Slice
	}{{"h2d", dev.All(), host.All()}, {"d2h", host.All(), dev.All()}, {"d2d", dev.Slice(0, 16), dev.Slice(64, 16)}} {
		err := x.e.CopySync(ctx, tc.dst, tc.src)
		require.ErrorIs(t, err, ErrNoCopier, tc.name)
		require.ErrorIs(t, err, ErrNotSupported, tc.name)
	}
	x.requireNoCS(t)
}

func TestAttachRegisterRefusals(t *testing.T) {
	x := newAttached(t, "6.8", 0, true)
	an := x.rt.Anchor()
	for _, tc := range []struct {
		name string
		va   uint64
		n    int
	}{{"outside", an.PoolStart + an.PoolLen, 1}, {"straddles the end", an.PoolStart + an.PoolLen - 1, 2}, {"zero", an.PoolStart, 0}, {"negative", an.PoolStart, -1}} {
		_, err := x.a.Register(tc.va, tc.n)
		require.ErrorIs(t, err, ErrInvalid, tc.name)
	}
	require.NoError(t, x.a.Detach())
	_, err := x.a.Register(an.PoolStart, 1)
	require.ErrorIs(t, err, ErrClosed)
}

// The memory region gxfer registers for runtime memory (fd, offset,
// length) and the DMA-BUF it shares: an importer reading the fd at that
// offset sees the buffer's bytes, also on 6.3-6.6 kernels where the
// driver ignores the export offset and the pool does not start at the
// mapped VA.
func TestAttachMRAndExportOffsets(t *testing.T) {
	for _, k := range []string{"6.5", "6.8"} {
		for _, off := range []uint64{0, 2<<20 + 4096*3 + 40} {
			t.Run(fmt.Sprintf("%s/%#x", k, off), func(t *testing.T) {
				x := newAttached(t, k, off, true)
				ctx := context.Background()
				va := x.rt.Anchor().PoolStart + 1<<20 + 8
				want := make([]byte, 64<<10)
				fill(want, 3)
				require.NoError(t, x.rt.CopyHostToDevice(ctx, va, want))
				b, err := x.a.Register(va, len(want))
				require.NoError(t, err)

				req, err := x.a.rt.MR(&b.m)
				require.NoError(t, err)
				require.Equal(t, uint64(len(want)), b.m.Size, "the MR's length")
				require.Equal(t, va, b.m.Addr, "the MR's iova")
				x.requireImporterSees(t, req.FD, req.Offset, want)

				d, err := b.ExportDMABuf()
				require.NoError(t, err)
				require.Equal(t, req.FD, d.FD().Int(), "one pool export, shared")
				require.Equal(t, req.Offset, d.Offset())
				x.requireImporterSees(t, d.FD().Int(), d.Offset(), want)
				d.Release()
				d.Release()
				require.EqualValues(t, 1, x.rt.Stats().LentExports)
				x.requireNoCS(t)
			})
		}
	}
}

func (x *attached) requireImporterSees(t *testing.T, fd int, off uint64, want []byte) {
	t.Helper()
	view, err := x.sim.DMABufView(fd)
	require.NoError(t, err)
	got := make([]byte, len(want))
	n, err := view.ReadAt(fd, got, off)
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	require.True(t, bytes.Equal(want, got), "the importer reads other bytes")
}

// Detach (and Engine.Close, for an attachment never detached) closes the
// pool's DMA-BUF before it returns: the runtime can UNMAP its pool right
// after, and not before. The runtime's context stays open.
func TestAttachDetachLetsTheRuntimeUnmap(t *testing.T) {
	for _, viaClose := range []bool{false, true} {
		t.Run(fmt.Sprintf("close=%v", viaClose), func(t *testing.T) {
			x := newAttached(t, "6.8", 1<<20, true)
			b, err := x.a.Register(x.rt.Anchor().PoolStart, 1<<20)
			require.NoError(t, err)
			d, err := b.ExportDMABuf()
			require.NoError(t, err)
			d.Release()
			require.ErrorIs(t, x.rt.Unmap(), unix.EINVAL, "gxfer's export pins the pool")
			if viaClose {
				require.NoError(t, x.e.Close())
			} else {
				require.NoError(t, x.a.Detach())
				require.NoError(t, x.a.Detach())
				require.Zero(t, x.a.Stats().Buffers)
				require.False(t, x.a.Stats().Export.Live)
			}
			require.NoError(t, x.rt.Unmap())
			x.requireNoCS(t)
			wantErr := ErrFreed
			if viaClose {
				wantErr = ErrClosed
			}
			require.ErrorIs(t, x.e.CopySync(context.Background(), b.Slice(0, 16), b.Slice(64, 16)), wantErr)
		})
	}
}

func TestAttachDevicesInfo(t *testing.T) {
	x := newAttached(t, "6.8", 0, true)
	devs := x.e.Devices()
	require.Len(t, devs, 1)
	d := devs[0]
	require.True(t, d.Attached)
	require.Equal(t, "hlsim runtime", d.LentBy)
	require.True(t, d.Emulated)
	require.Equal(t, x.rt.Anchor().PoolLen, d.PoolLen)
	require.NoError(t, x.a.Detach())
	require.Empty(t, x.e.Devices())
}

// A transfer from runtime memory over an endpoint that cannot register the
// DMA-BUF (TCP here, a NIC refusing DMA-BUF alike) is staged through host
// memory by the copier; without a copier it fails with ErrNoCopier.
func TestAttachEndpointStagesThroughTheCopier(t *testing.T) {
	for _, copier := range []bool{true, false} {
		t.Run(fmt.Sprintf("copier=%v", copier), func(t *testing.T) {
			x := newAttached(t, "6.8", 0, copier)
			ctx := context.Background()
			peer := newEngine(t, Config{Devices: DevicesNone, RDMA: RDMAConfig{Disabled: true}})
			l, err := peer.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			ep, err := x.e.Dial(ctx, "tcp", l.Addr(), WithTransport(TransportTCP))
			require.NoError(t, err)
			const n = 1<<20 + 5
			dev, err := x.a.Register(x.rt.Anchor().PoolStart+4096, n)
			require.NoError(t, err)
			want := make([]byte, n)
			fill(want, 11)
			require.NoError(t, x.rt.CopyHostToDevice(ctx, dev.Addr(), want))
			dst, err := peer.Alloc(n, Host)
			require.NoError(t, err)
			key, err := dst.Export()
			require.NoError(t, err)
			err = ep.PutSync(ctx, dev.All(), key)
			if !copier {
				require.ErrorIs(t, err, ErrNoCopier)
				x.requireNoCS(t)
				return
			}
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, dst.Bytes()))
			// and back
			clear(want[:100])
			copy(dst.Bytes(), want)
			require.NoError(t, ep.GetSync(ctx, dev.All(), key))
			got := make([]byte, n)
			require.NoError(t, x.rt.CopyDeviceToHost(ctx, got, dev.Addr()))
			require.True(t, bytes.Equal(want, got))
			require.NotZero(t, x.a.Stats().Copies)
			x.requireNoCS(t)
		})
	}
}
