package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/copier"
)

// TestPutCtxBoundsPeerDMA: over "unix", a Put into the peer's Gaudi memory
// (the peer does the DMA and answers) ends when its ctx is cancelled,
// with ErrCanceled, instead of waiting for the peer's answer. Before the
// fix the ctx did not reach the goroutine doing the request: the Put
// resolved when the peer's (delayed) DMA finished, successfully.
func TestPutCtxBoundsPeerDMA(t *testing.T) {
	cfg := Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 64 << 20}}
	owner, peer, _, ep, _ := unixPair(t, cfg)
	d, err := owner.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	k, err := d.Export()
	require.NoError(t, err)
	src, err := peer.Alloc(1<<20, Host)
	require.NoError(t, err)
	require.NoError(t, ep.PutSync(context.Background(), src.All(), k), "the path works")

	m, err := owner.Emulator(0)
	require.NoError(t, err)
	m.DelayNextCS(1, 3*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	f := ep.Put(ctx, src.All(), k)
	time.AfterFunc(30*time.Millisecond, cancel)
	<-f.Done()
	require.ErrorIs(t, f.Err(), ErrCanceled)
	require.ErrorIs(t, f.Err(), context.Canceled)
}

// TestCopyCancelDropsQueued: a Gaudi copy still in its device queue when
// its ctx is cancelled is dropped: its future resolves with ErrCanceled,
// the destination is never written, and nothing stays in flight. Before,
// ctx bounded only the submission: the queued copy ran and succeeded.
func TestCopyCancelDropsQueued(t *testing.T) {
	e := newEngine(t, Config{})
	h, _ := e.Alloc(1<<20, Host)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	out, _ := e.Alloc(4096, Host)
	fill(h.Bytes(), 3)
	entered := make(chan struct{})
	release := make(chan struct{})
	first := true
	hook := func() { // blocks the device worker on its first batch
		if first {
			first = false
			close(entered)
			<-release
		}
	}
	e.cp.HookProcess.Store(&hook)
	bg := context.Background()
	f0 := e.Copy(bg, d.Slice(0, 4096), h.Slice(0, 4096))
	<-entered
	ctx, cancel := context.WithCancel(bg)
	f1 := e.Copy(ctx, d.Slice(8192, 4096), h.Slice(8192, 4096)) // queued behind the blocked worker
	cancel()
	close(release)
	require.NoError(t, f0.Wait(bg))
	<-f1.Done()
	require.ErrorIs(t, f1.Err(), ErrCanceled)
	require.ErrorIs(t, f1.Err(), context.Canceled)
	require.NoError(t, e.CopySync(bg, out.All(), d.Slice(8192, 4096)))
	require.Equal(t, make([]byte, 4096), out.Bytes(), "a dropped copy wrote its destination")
	require.Zero(t, e.Stats().InFlight)
}

// TestCrossDeviceCancelStopsChunks: cancelling the ctx of a copy between
// two devices (staged through host memory in chunks) while its first
// chunk's DMA is in flight stops the chunks not yet started: the copy ends
// with ErrCanceled once the started DMA retired, and the destination's
// last chunk is never written. Before, the copy ran to its end.
func TestCrossDeviceCancelStopsChunks(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 2})
	const n = 3 * copier.StageChunk
	h, _ := e.Alloc(n, Host)
	d0, _ := e.Alloc(n, Gaudi(0))
	d1, _ := e.Alloc(n, Gaudi(1))
	out, _ := e.Alloc(copier.StageChunk, Host)
	bg := context.Background()
	fill(h.Bytes(), 5)
	require.NoError(t, e.CopySync(bg, d0.All(), h.All()))
	e.cp.Devs[0].Sim.DelayNextCS(1, 300*time.Millisecond) // the first chunk's D2H
	ctx, cancel := context.WithCancel(bg)
	f := e.Copy(ctx, d1.All(), d0.All())
	time.AfterFunc(50*time.Millisecond, cancel)
	<-f.Done()
	require.ErrorIs(t, f.Err(), ErrCanceled)
	require.NoError(t, e.CopySync(bg, out.All(), d1.Slice(2*copier.StageChunk, copier.StageChunk)))
	require.Equal(t, make([]byte, copier.StageChunk), out.Bytes(), "a chunk started after the cancellation")
	require.Zero(t, e.Stats().InFlight)
}
