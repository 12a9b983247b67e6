package dma

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// longCopy opens a device on a new emulator of model and submits one CS
// copying n bytes from mapped host pages into device memory; it returns
// the device, the emulator, the CS's seq and the copy's two ends.
func longCopy(t *testing.T, model hlsim.Model, n uint64) (*Device, *hlsim.Device, uint64, *HostMapping, *DeviceMem) {
	t.Helper()
	sim, err := hlsim.New(hlsim.Config{Model: model, DRAMSize: 1 << 30,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
	require.NoError(t, err)
	h, err := AllocHostPages(n)
	require.NoError(t, err)
	t.Cleanup(func() { _ = FreeHostPages(h) })
	hm, err := d.MapHostBytes(h)
	require.NoError(t, err)
	m, err := d.AllocDevice(n)
	require.NoError(t, err)
	cs, err := d.NewCSBuilder(CSOptions{Queues: d.H2DQueues(), CBSize: 64 << 10, PieceSize: 1 << 20})
	require.NoError(t, err)
	require.NoError(t, cs.AddCopy(m.Addr(), hm.DeviceAddr(), n))
	chunks, err := cs.Seal()
	require.NoError(t, err)
	seq, err := d.Submit(chunks)
	require.NoError(t, err)
	return d, sim, seq, hm, m
}

// TestCloseRunning closes a device while a long CS runs on it.
// CloseRunning closes the context before anything is released, so the
// engine never runs into an unmapped host page or freed device memory;
// Close, which releases first, is what a caller that may have given up on
// a CS must not use (the row with running=false shows why: it is
// expected to fault). The emulated context teardown aborts the CS.
func TestCloseRunning(t *testing.T) {
	for _, tc := range []struct {
		name    string
		model   hlsim.Model
		running bool
		faults  bool
	}{
		{"gaudi1/CloseRunning", hlsim.ModelGaudi1, true, false},
		{"gaudi2/CloseRunning", hlsim.ModelGaudi2, true, false},
		{"gaudi2/Close", hlsim.ModelGaudi2, false, true},
		{"gaudi3/CloseRunning", hlsim.ModelGaudi3, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, sim, seq, hm, m := longCopy(t, tc.model, 256<<20)
			for sim.Stats().BytesMoved == 0 {
				time.Sleep(50 * time.Microsecond)
			}
			st, err := d.Wait(seq, 0)
			require.NoError(t, err)
			require.Equal(t, CSBusy.String(), st.String(), "the CS is still running when the device closes")
			if tc.running {
				require.NoError(t, d.CloseRunning())
			} else {
				_ = d.Close()
			}
			time.Sleep(10 * time.Millisecond)
			if tc.faults {
				require.NotZero(t, sim.Stats().EngineFaults, "Close released the mappings under the running CS")
			} else {
				require.Zero(t, sim.Stats().EngineFaults, "the CS ran into memory released under it")
			}
			require.NoError(t, d.Close(), "a second close is a no-op")
			require.NoError(t, hm.Unmap(), "released by the close")
			require.NoError(t, m.Free(), "released by the close")
		})
	}
}
