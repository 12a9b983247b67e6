package hlsim

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// reopenAfter polls Open until it succeeds (bounded by safety); it fails
// the test on an error other than the EBUSY/EAGAIN of a context not yet
// released or a reset in progress.
func reopenAfter(t *testing.T, d *Device) {
	t.Helper()
	for deadline := time.Now().Add(safety); ; time.Sleep(time.Millisecond) {
		b, err := d.open()
		if err == nil {
			require.NoError(t, b.Close())
			return
		}
		if !isErrnoOf(err, unix.EBUSY) && !isErrnoOf(err, unix.EAGAIN) {
			require.NoError(t, err)
		}
		require.True(t, time.Now().Before(deadline), "the device was not released: %v", err)
	}
}

func isErrnoOf(err error, e unix.Errno) bool {
	he, ok := err.(*hlsys.Error)
	return ok && he.Errno == e
}

// TestHeldExports (R12): with Config.HeldExports a DMA-BUF export still
// open keeps a closed context alive (memory.c export_dmabuf's get_file):
// Open stays EBUSY, the release watchdog still runs, and when it expires
// the hard reset kills the process (device.c device_release_watchdog_func,
// device_kill_open_processes); the context is released once the export
// is closed.
func TestHeldExports(t *testing.T) {
	cases := []struct {
		name     string
		held     bool          // Config.HeldExports
		closeX   bool          // the export is closed before the Backend
		reset    bool          // Reset (with an eventfd) before the Close
		watchdog time.Duration // Config.ReleaseWatchdog
		// wantHeld: Open is EBUSY after Close, until the export goes.
		wantHeld          bool
		wantResets, kills uint64
	}{
		{name: "off: released at Close", held: false, wantHeld: false},
		{name: "export closed first", held: true, closeX: true, wantHeld: false},
		{name: "export held", held: true, wantHeld: true},
		{name: "export released before the watchdog", held: true, reset: true, watchdog: time.Hour, wantHeld: true, wantResets: 1},
		{name: "watchdog expires while held", held: true, reset: true, watchdog: 50 * time.Millisecond, wantHeld: true, wantResets: 1, kills: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kill, killed := killHook()
			r := newRig(t, Config{HeldExports: tc.held, ReleaseWatchdog: tc.watchdog, Kill: kill})
			if tc.held && !r.d.leases {
				t.Skip("write leases unavailable (fs.leases-enable=0): exports cannot be watched")
			}
			va := r.dram(1 << 21)
			x, err := hlsys.MemExportDMABuf(r.b, va, 1<<21, 0)
			require.NoError(t, err)
			t.Cleanup(func() { _ = x.Close() })
			if tc.reset {
				efd := registerEventFD(t, r)
				r.d.Reset()
				waitEvent(t, efd, safety)
				require.Zero(t, r.d.Stats().Resets, "the watchdog runs")
			}
			if tc.closeX {
				require.NoError(t, x.Close())
			}
			require.NoError(t, r.b.Close())
			_, err = hlsys.GetDeviceStatus(r.b)
			require.ErrorIs(t, err, os.ErrClosed, "the fd is closed for the process")
			if !tc.wantHeld {
				reopenAfter(t, r.d)
				require.Zero(t, r.d.Stats().Kills)
				return
			}
			_, err = r.d.open()
			require.True(t, isErrnoOf(err, unix.EBUSY) || isErrnoOf(err, unix.EAGAIN), "Open while the export holds the context: %v", err)
			if tc.kills > 0 {
				recvKill(t, killed)
				require.Equal(t, uint32(hlsys.DeviceStatusInReset), r.d.status.Load())
				_, err = r.d.open()
				require.True(t, isErrnoOf(err, unix.EAGAIN), "Open during the hard reset: %v", err)
			}
			// Nothing is reset before the export goes, but by the watchdog.
			require.Equal(t, tc.kills, r.d.Stats().Resets)
			require.Equal(t, tc.kills, r.d.Stats().Kills)
			require.NoError(t, x.Close()) // the importer lets go
			reopenAfter(t, r.d)
			require.Equal(t, tc.wantResets, r.d.Stats().Resets)
			require.Equal(t, tc.kills, r.d.Stats().Kills)
		})
	}
}
