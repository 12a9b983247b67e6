package dma

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestCloseInMalfunction: a CopySync whose wait the driver refuses
// because the device is in NEEDS_RESET (reset_on_lockup=0 after a
// lockup: hl_wait_ioctl EBUSY, hlsim RULES.md R10) ends with
// ErrMalfunction and leaves its command buffer to Close: the CS may still
// run on the engines. In that state the driver refuses MEMORY UNMAP
// (hl_mem_ioctl: EBUSY while not operational), so Close cannot release
// the buffer's pages before the context goes: it must close the context
// first (the driver then hard-resets the device, hl_device_release) and
// free them after, as CloseRunning does, not keep them forever.
func TestCloseInMalfunction(t *testing.T) {
	for _, status := range []uint32{hlsys.DeviceStatusNeedsReset, hlsys.DeviceStatusMalfunction} {
		t.Run(DeviceStatus(status).String(), func(t *testing.T) {
			d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
			f.mu.Lock()
			f.status = status
			f.mu.Unlock()
			f.wait = func(uint64, uint64) (hlsys.WaitCSOut, error) { return hlsys.WaitCSOut{}, unix.EBUSY }
			f.memErr = func(a *hlsys.MemArgs) error {
				if a.Op == hlsys.MemOpUnmap {
					return unix.EBUSY
				}
				return nil
			}
			err := d.CopySync(d.Info().DramBase, d.Info().DramBase+4096, 4096)
			require.ErrorIs(t, err, ErrMalfunction)

			var cbs []*CB
			d.mu.Lock()
			for _, r := range d.live {
				if cb, ok := r.(*CB); ok {
					cbs = append(cbs, cb)
				}
			}
			d.mu.Unlock()
			require.Len(t, cbs, 1, "the CS's command buffer is kept: the CS may still run")
			require.NotNil(t, cbs[0].pages)

			unmaps := countUnmaps(f)
			_ = d.Close()
			require.Equal(t, 1, f.closeCount())
			require.Equal(t, unmaps, countUnmaps(f), "no UNMAP under a CS that may run: the context goes first")
			require.True(t, cbs[0].pages == nil, "the buffer's pages are freed once the context is gone")
		})
	}
}

func countUnmaps(f *fakeBackend) int {
	n := 0
	for _, m := range f.memOps() {
		if m.Op == hlsys.MemOpUnmap {
			n++
		}
	}
	return n
}
