package dma

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestReleaseRetriedAfterRefusal: the driver refuses MEMORY UNMAP and CB
// DESTROY while the device is not operational (hl_mem_ioctl,
// hl_cb_ioctl: EBUSY). The mapping (or CB) must stay live so that a
// later Unmap (Close) does the release; it used to be marked done by the
// refused attempt, so the retry returned nil and left the pages pinned
// (the CB allocated) until the context closed.
func TestReleaseRetriedAfterRefusal(t *testing.T) {
	tests := []struct {
		name  string
		model hlsim.Model
		// release releases the object; gone reports (through the
		// backend) whether the driver no longer holds it.
		setup func(t *testing.T, d *Device) (release func() error, gone func() bool)
	}{
		{"host mapping", hlsim.ModelGaudi2, func(t *testing.T, d *Device) (func() error, func() bool) {
			pages, err := AllocHostPages(4096)
			require.NoError(t, err)
			t.Cleanup(func() { _ = FreeHostPages(pages) })
			h, err := d.MapHostBytes(pages)
			require.NoError(t, err)
			return h.Unmap, func() bool { return hlsys.MemUnmap(d.b, h.DeviceAddr()) != nil }
		}},
		{"Gaudi1 CB", hlsim.ModelGaudi1, func(t *testing.T, d *Device) (func() error, func() bool) {
			cb, err := d.NewCB(4096)
			require.NoError(t, err)
			return cb.Close, func() bool { return hlsys.CBDestroy(d.b, cb.handle) != nil }
		}},
		{"Gaudi2 CB", hlsim.ModelGaudi2, func(t *testing.T, d *Device) (func() error, func() bool) {
			cb, err := d.NewCB(4096)
			require.NoError(t, err)
			return cb.Close, func() bool { return hlsys.MemUnmap(d.b, cb.va) != nil }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, err := hlsim.New(hlsim.Config{Model: tt.model, DRAMSize: 256 << 20})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sim.Close() })
			d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })

			release, gone := tt.setup(t, d)
			sim.ForceStatus(hlsys.DeviceStatusNeedsReset)
			err = release()
			sim.ForceStatus(hlsys.DeviceStatusOperational)
			require.ErrorIs(t, err, unix.EBUSY, "the driver refused the release")
			require.NotZero(t, d.Stats().Live, "what the driver kept is still live")
			require.NoError(t, release())
			require.True(t, gone(), "the retry released it in the driver")
			require.Zero(t, d.Stats().Live)
		})
	}
}
