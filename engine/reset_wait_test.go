package engine

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestWaitDuringResetKeepsTheCS: while the device is resetting the driver
// refuses WAIT_CS (EBUSY, hl_wait_ioctl), but a CS it has not aborted still
// completes afterwards. A copy whose CS is in flight across such a window
// must end with the CS's own outcome, not with the refusal; a device in
// malfunction ends it.
func TestWaitDuringResetKeepsTheCS(t *testing.T) {
	cases := []struct {
		name    string
		status  uint32
		wantErr bool
	}{
		{"in reset", hlsys.DeviceStatusInReset, false},
		{"in reset after release", hlsys.DeviceStatusInResetAfterDeviceRelease, false},
		{"malfunction", hlsys.DeviceStatusMalfunction, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			sim := e.cp.Devs[0].Sim
			const size = 64 << 10
			src, err := e.Alloc(size, Host)
			require.NoError(t, err)
			fill(src.Bytes(), 7)
			dst, err := e.Alloc(size, Gaudi(0))
			require.NoError(t, err)

			sim.DelayNextCS(1, 150*time.Millisecond) // the CS stays in flight
			f := e.Copy(context.Background(), dst.All(), src.All())
			time.Sleep(20 * time.Millisecond)
			sim.ForceStatus(tc.status) // every WAIT_CS now answers EBUSY
			time.Sleep(60 * time.Millisecond)
			if !tc.wantErr {
				sim.ForceStatus(hlsys.DeviceStatusOperational)
			}
			err = f.Wait(context.Background())
			if tc.wantErr {
				require.Error(t, err)
				sim.ForceStatus(hlsys.DeviceStatusOperational) // let Close release
				return
			}
			require.NoError(t, err)
			back, err := e.Alloc(size, Host)
			require.NoError(t, err)
			require.NoError(t, e.CopySync(context.Background(), back.All(), dst.All()))
			require.True(t, bytes.Equal(src.Bytes(), back.Bytes()))
		})
	}
}
