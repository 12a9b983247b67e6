package dma

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestGaudi3ReleaseWhileChannelRuns: a Device released with a PDMA
// channel still running (CloseRunning, or the reset watcher's release
// after the driver reported a reset) must not unmap or free anything the
// channel may still read or write before the context is gone (reset.go:
// "nothing the device may still be running is unmapped before the fd is
// gone"). Direct mode stopped the channels and then at once unmapped
// their rings and the completion-write scratch from the device MMU and
// freed them (MEMORY UNMAP/FREE, CB DESTROY): a stop is a register
// store, which the engine may not have acted on yet (the emulator sees it
// here only by polling, as without its Doorbell hint), so the channel ran
// into its unmapped ring: an MMU fault and a device reset.
func TestGaudi3ReleaseWhileChannelRuns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release func(t *testing.T, d *Device, sim *hlsim.Device)
	}{
		{"CloseRunning", func(t *testing.T, d *Device, _ *hlsim.Device) {
			require.NoError(t, d.CloseRunning())
		}},
		// Close with a submission nobody waited for: the Device sees its
		// counters short of their targets and releases as CloseRunning
		// (it unmapped and freed everything under the channel).
		{"Close", func(t *testing.T, d *Device, _ *hlsim.Device) {
			require.NoError(t, d.Close())
		}},
		{"device reset", func(t *testing.T, d *Device, sim *hlsim.Device) {
			sim.Reset() // the watcher releases the context (reset.go)
			require.Eventually(t, func() bool { return d.rw.released.Load() }, 10*time.Second, time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 256 << 20
			sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi3, DRAMSize: 1 << 30,
				Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sim.Close() })
			d, err := OpenBackend(sim.Name(), func() (hlsys.Backend, error) {
				b, err := simOpen(sim)()
				if err != nil {
					return nil, err
				}
				return noBell{b}, nil
			}, Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			h, err := AllocHostPages(n)
			require.NoError(t, err)
			t.Cleanup(func() { _ = FreeHostPages(h) })
			hm, err := d.MapHostBytes(h)
			require.NoError(t, err)
			m, err := d.AllocDevice(n)
			require.NoError(t, err)
			cs, err := d.NewCSBuilder(CSOptions{Queues: d.H2DQueues()[:1], CBSize: 64 << 10, PieceSize: 1 << 20})
			require.NoError(t, err)
			require.NoError(t, cs.AddCopy(m.Addr(), hm.DeviceAddr(), n))
			chunks, err := cs.Seal()
			require.NoError(t, err)
			_, err = d.Submit(chunks)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return sim.Stats().BytesMoved > 0 }, 10*time.Second, 100*time.Microsecond,
				"the channel started the copy")
			require.Less(t, sim.Stats().BytesMoved, uint64(n), "the copy is still running")

			resets := sim.Stats().Resets
			tc.release(t, d, sim)

			require.Zero(t, sim.Stats().EngineFaults, "the channel ran into memory released under it")
			if tc.name != "device reset" {
				// The channels were stopped before the release: the
				// driver's idle check finds them idle (hlsim G14).
				require.Equal(t, resets, sim.Stats().Resets, "the release reset the device")
			}
		})
	}
}
