package hlsys_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// deep calls fn with about depth KiB of stack in use, so that the backend's
// own calls make the goroutine stack grow (and move) during the ioctl.
func deep(depth int, fn func()) byte {
	var pad [1024]byte
	pad[depth%1024] = byte(depth)
	if depth == 0 {
		fn()
		return pad[0]
	}
	return deep(depth-1, fn) + pad[depth%1024]
}

// TestOutputsSurviveStackGrowth: the emulator runs on the caller's
// goroutine, so user pointers in ioctl structs must not point into a stack
// that may move (a bug found in review: HW_IP_INFO read back as zeros).
func TestOutputsSurviveStackGrowth(t *testing.T) {
	sim, err := hlsim.New(hlsim.Config{DRAMSize: 64 << 20})
	require.NoError(t, err)
	defer sim.Close()
	sb, err := sim.Open()
	require.NoError(t, err)
	defer sb.Close()
	b := sb.(hlsys.Backend) // the emulator's context is one
	for depth := 0; depth < 64; depth += 3 {
		var info hlsys.HwIPInfo
		var ierr error
		deep(depth, func() { info, ierr = hlsys.GetHwIPInfo(b) })
		require.NoError(t, ierr)
		require.Equal(t, uint32(hlsys.DeviceIDGaudi2), info.DeviceID, "depth %d", depth)
		var st uint32
		deep(depth, func() { st, ierr = hlsys.GetDeviceStatus(b) })
		require.NoError(t, ierr)
		require.Equal(t, uint32(hlsys.DeviceStatusOperational), st)
	}
}
