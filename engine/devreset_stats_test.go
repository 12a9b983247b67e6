package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeviceStatsSurviveReopen: a device's counters in Stats (host
// mappings, its caches' and its completion actor's counts) keep counting
// across the device's reset and reopening: the reopened device's
// machinery starts from zero, and before, so did the counters, which
// then went backwards (a Prometheus counter reset, a negative delta for
// a caller taking differences of Stats).
func TestDeviceStatsSurviveReopen(t *testing.T) {
	e := newEngine(t, Config{Emulator: EmulatorConfig{Model: "gaudi2", CSTimeout: 2 * time.Second}})
	ctx := context.Background()
	h, err := e.Alloc(1<<16, Host)
	require.NoError(t, err)
	d, err := e.Alloc(1<<16, Gaudi(0))
	require.NoError(t, err)
	for range 10 {
		require.NoError(t, e.CopySync(ctx, d.All(), h.All()))
	}
	before := e.Stats().Devices[0]
	require.NotZero(t, before.Actor.Retired)
	require.NotZero(t, before.HostMappings)
	require.NotZero(t, before.RegCache.Gets)

	m, err := e.Emulator(0)
	require.NoError(t, err)
	m.HangNextCS(1)
	require.ErrorIs(t, e.CopySync(ctx, d.All(), h.All()), ErrDeviceLost)
	require.Eventually(t, func() bool { return e.cp.Reopened() >= 1 }, 10*time.Second, time.Millisecond)

	after := e.Stats().Devices[0]
	counters := []struct {
		name          string
		before, after uint64
	}{
		{"HostMappings", before.HostMappings, after.HostMappings},
		{"RegCache.Gets", before.RegCache.Gets, after.RegCache.Gets},
		{"RegCache.Misses", before.RegCache.Misses, after.RegCache.Misses},
		{"RegCache.Registrations", before.RegCache.Registrations, after.RegCache.Registrations},
		{"Actor.Retired", before.Actor.Retired, after.Actor.Retired},
		{"Actor.WaiterPolls", before.Actor.WaiterPolls, after.Actor.WaiterPolls},
	}
	for _, c := range counters {
		require.GreaterOrEqual(t, c.after, c.before, "%s went backwards after the reopen", c.name)
	}
	require.Zero(t, after.RegCache.Regions, "gauges are the new device's: no region mapped on it yet")
}
