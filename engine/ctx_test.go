package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
