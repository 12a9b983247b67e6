package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEmulator: each injected fault reaches the copies of the emulated
// device through the public API, with the error a user matches, on the
// Gaudi2 model (command submission) and the Gaudi3 model (direct PDMA
// mode, where the device path applies the TDR itself). A fault that makes
// the driver reset the device (a TDR on Gaudi2, a PDMA channel error on
// Gaudi3, Reset) loses the device's buffers: the engine opens the device
// again and a new buffer works.
func TestEmulator(t *testing.T) {
	for _, model := range []string{"gaudi2", "gaudi3"} {
		t.Run(model, func(t *testing.T) { testEmulator(t, model) })
	}
}

func testEmulator(t *testing.T, model string) {
	ctx := context.Background()
	g2 := model == "gaudi2"
	errOf := func(g2Err, g3Err error) error {
		if g2 {
			return g2Err
		}
		return g3Err
	}
	// submitted is when the copy under test was submitted (before Copy:
	// the CS is on the device when Copy returns, and its completion may
	// be held from then on).
	var submitted time.Time
	for _, tc := range []struct {
		name   string
		inject func(m *Emulator)
		opts   []OpOption
		check  func(t *testing.T, f *Future, m *Emulator)
		lost   bool // the driver resets the device
	}{
		{"abort", func(m *Emulator) { m.AbortNextCS(1) }, nil, func(t *testing.T, f *Future, _ *Emulator) {
			require.ErrorIs(t, f.Wait(ctx), errOf(ErrAborted, ErrDeviceLost)) // Gaudi3: a PDMA channel error resets the device
		}, !g2},
		{"hang past the deadline", func(m *Emulator) { m.HangNextCS(1) }, []OpOption{Timeout(20 * time.Millisecond)},
			func(t *testing.T, f *Future, _ *Emulator) {
				require.ErrorIs(t, f.Wait(ctx), ErrTimeout)
			}, g2}, // on Gaudi2 the TDR then resets the device
		{"hang until the TDR", func(m *Emulator) { m.HangNextCS(1) }, nil, func(t *testing.T, f *Future, _ *Emulator) {
			require.ErrorIs(t, f.Wait(ctx), errOf(ErrDeviceLost, ErrTimeout))
		}, g2},
		{"delay", func(m *Emulator) { m.DelayNextCS(1, 50*time.Millisecond) }, nil, func(t *testing.T, f *Future, _ *Emulator) {
			require.NoError(t, f.Wait(ctx))
			require.GreaterOrEqual(t, time.Since(submitted), 50*time.Millisecond, "completion held back")
		}, false},
		{"delay past the deadline", func(m *Emulator) { m.DelayNextCS(1, 300*time.Millisecond) }, []OpOption{Timeout(20 * time.Millisecond)},
			func(t *testing.T, f *Future, _ *Emulator) {
				require.ErrorIs(t, f.Wait(ctx), ErrTimeout)
			}, false},
		{"reset", func(m *Emulator) { m.HangNextCS(1) }, nil, func(t *testing.T, f *Future, m *Emulator) {
			// The hung CS must be on the device before the reset.
			require.Eventually(t, func() bool { return m.sim.Stats().CSSubmitted > 0 }, 5*time.Second, time.Millisecond)
			require.False(t, f.IsDone())
			m.Reset()
			require.ErrorIs(t, f.Wait(ctx), ErrDeviceLost)
		}, true},
		{"cancelled", func(m *Emulator) { m.AbortNextCS(1); m.AbortNextCS(0) }, nil, func(t *testing.T, f *Future, _ *Emulator) {
			require.NoError(t, f.Wait(ctx))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{EmulatedCount: 2, Emulator: EmulatorConfig{Model: model, DRAMSize: 64 << 20, CSTimeout: 2 * time.Second}})
			m, err := e.Emulator(1)
			require.NoError(t, err)
			require.Equal(t, 1, m.Device())
			h, _ := e.Alloc(1<<20, Host)
			d, _ := e.Alloc(1<<20, Gaudi(1))
			d0, _ := e.Alloc(1<<20, Gaudi(0))
			tc.inject(m)
			// Device 0 is untouched by device 1's faults.
			require.NoError(t, e.CopySync(ctx, d0.All(), h.All()))
			submitted = time.Now()
			tc.check(t, e.Copy(ctx, d.All(), h.All(), tc.opts...), m)
			if tc.lost {
				require.Eventually(t, func() bool { return e.Devices()[1].Resets == 1 }, 10*time.Second, time.Millisecond, "opened again")
				require.NoError(t, e.WaitDevice(ctx, 1))
				require.ErrorIs(t, e.CopySync(ctx, d.All(), h.All()), ErrDeviceLost, "the old context's buffer")
				require.NoError(t, d.Free())
				d, err = e.Alloc(1<<20, Gaudi(1))
				require.NoError(t, err)
			}
			fill(h.Bytes(), 9)
			require.NoError(t, e.CopySync(ctx, d.All(), h.All()), "the device works again")
			back, _ := e.Alloc(1<<20, Host)
			require.NoError(t, e.CopySync(ctx, back.All(), d.All()))
			require.Equal(t, h.Bytes(), back.Bytes())
			require.Zero(t, e.Devices()[0].Resets, "device 0 untouched")
			if !tc.lost {
				require.Zero(t, e.Devices()[1].Resets)
			}
		})
	}
}

func TestEmulatorRefusals(t *testing.T) {
	e := newEngine(t, Config{})
	_, err := e.Emulator(1)
	require.ErrorIs(t, err, ErrNoDevice)
	_, err = e.Emulator(-1)
	require.ErrorIs(t, err, ErrNoDevice)

	// A real device: nothing to inject into.
	g := e.cp.Devs[0]
	sim := g.Sim
	g.Sim = nil
	_, err = e.Emulator(0)
	g.Sim = sim
	require.ErrorIs(t, err, ErrNotEmulated)

	none := newEngine(t, Config{Devices: DevicesNone})
	_, err = none.Emulator(0)
	require.ErrorIs(t, err, ErrNoDevice)

	m, err := e.Emulator(0)
	require.NoError(t, err)
	require.NoError(t, e.Close())
	_, err = e.Emulator(0)
	require.ErrorIs(t, err, ErrClosed)
	m.HangNextCS(1) // no effect, no panic, after Close
	m.Reset()
}
