package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNegativeRegCacheMaxRegions: a negative RegCache.MaxRegions is
// bad input. memcache.New refuses it, but copier.AddDevice drops that
// error and leaves Device.HostMaps nil: New succeeds, every copy between
// host and device memory then panics on the nil cache (ErrPanic), and
// Free/Close of a host buffer panic in Forget. A negative
// IPCCache.MaxRegions is refused too.
func TestNegativeRegCacheMaxRegions(t *testing.T) {
	e, err := New(Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 64 << 20},
		RegCache: RegCacheConfig{MaxRegions: -1}})
	if err == nil {
		ctx := context.Background()
		h, aerr := e.Alloc(4096, Host)
		require.NoError(t, aerr)
		d, aerr := e.Alloc(4096, Gaudi(0))
		require.NoError(t, aerr)
		cerr := e.CopySync(ctx, d.All(), h.All())
		var closePanic any
		func() {
			defer func() { closePanic = recover() }()
			_ = e.Close()
		}()
		t.Fatalf("New accepted RegCache.MaxRegions -1; copy: %v; Close panicked: %v", cerr, closePanic)
	}
	require.ErrorIs(t, err, ErrInvalid)
	_, err = New(Config{Devices: DevicesNone, IPCCache: RegCacheConfig{MaxRegions: -1}})
	require.ErrorIs(t, err, ErrInvalid, "a negative IPCCache.MaxRegions")
}

// TestIPCCacheDisabledRefused: Config.IPCCache is a RegCacheConfig, whose
// Disabled promises "register and deregister around every operation",
// but the IPC handle cache has no such mode and New ignored the field:
// peers' buffers stayed mapped, cached, for a caller who had turned the
// cache off. New refuses it (ErrInvalid, like a negative MaxRegions)
// instead of silently caching.
func TestIPCCacheDisabledRefused(t *testing.T) {
	e, err := New(Config{Devices: DevicesNone, IPCCache: RegCacheConfig{Disabled: true}})
	if err == nil {
		require.NoError(t, e.Close())
	}
	require.ErrorIs(t, err, ErrInvalid, "IPCCache.Disabled accepted and ignored")
}
