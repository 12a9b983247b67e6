package dma

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// TestResetReleasesHeldExports: with the emulator keeping a context alive
// while one of its DMA-BUF exports is referenced (hlsim R12, the driver's
// export_dmabuf get_file), a Device that sees a reset closes its own
// exports with its context, so the context is released before the
// release watchdog and nothing is killed. A reference the Device does not
// own (a dup a user or an importer keeps) holds the context past the
// watchdog: the driver kills the process, which the Device cannot
// prevent (reset.go); once that reference goes the device opens again.
func TestResetReleasesHeldExports(t *testing.T) {
	for _, tc := range []struct {
		name      string
		userDup   bool
		watchdog  time.Duration
		wantKills int32
	}{
		{name: "own exports only", watchdog: 20 * time.Second},
		{name: "a dup held past the watchdog", userDup: true, watchdog: 100 * time.Millisecond, wantKills: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kills atomic.Int32
			sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 256 << 20,
				ReleaseWatchdog: tc.watchdog, HeldExports: true, Kill: func() { kills.Add(1) },
				Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sim.Close() })
			d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			m, err := d.AllocDevice(2 << 20)
			require.NoError(t, err)
			x, err := d.ExportDMABuf(m, 0, 2<<20)
			require.NoError(t, err)
			if tc.userDup {
				dup, err := x.FD().Dup()
				require.NoError(t, err)
				t.Cleanup(func() { _ = dup.Close() })
				defer func() { require.NoError(t, dup.Close()) }() // the holder lets go at the end
			}

			sim.Reset()
			require.Eventually(t, func() bool { return d.rw.released.Load() }, 10*time.Second, time.Millisecond,
				"the Device releases its context on DEVICE_RESET")
			require.ErrorIs(t, d.ResetErr(), ErrDeviceReset)
			if tc.wantKills > 0 {
				require.Eventually(t, func() bool { return kills.Load() == tc.wantKills }, 10*time.Second, time.Millisecond,
					"the held context is killed when the watchdog expires")
				_, err := sim.Open()
				require.Error(t, err, "the device is not released while the dup lives")
				return
			}
			var d2 *Device
			require.Eventually(t, func() bool {
				d2, err = OpenBackend(sim.Name(), simOpen(sim), Options{})
				return err == nil
			}, 10*time.Second, time.Millisecond, "the device opens again once the context is released")
			require.NoError(t, d2.Close())
			require.Zero(t, kills.Load(), "the driver would have killed the process")
			require.Equal(t, uint64(1), sim.Stats().Resets, "the release under the watchdog hard-resets (R4)")
		})
	}
}
