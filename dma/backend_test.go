package dma

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestPublicValuesMatchTheBinding: dma's own constants carry the driver
// binding's values (they are written out so that dma's API names no
// internal type).
func TestPublicValuesMatchTheBinding(t *testing.T) {
	require.Equal(t, hlsys.Legacy, hlsys.Numbering(NumberingLegacy))
	require.Equal(t, hlsys.Accel, hlsys.Numbering(NumberingAccel))
	require.Equal(t, hlsys.Accel.String(), NumberingAccel.String())
	for st, want := range map[DeviceStatus]uint32{
		StatusOperational:               hlsys.DeviceStatusOperational,
		StatusInReset:                   hlsys.DeviceStatusInReset,
		StatusMalfunction:               hlsys.DeviceStatusMalfunction,
		StatusNeedsReset:                hlsys.DeviceStatusNeedsReset,
		StatusInDeviceCreation:          hlsys.DeviceStatusInDeviceCreation,
		StatusInResetAfterDeviceRelease: hlsys.DeviceStatusInResetAfterDeviceRelease,
	} {
		require.Equal(t, want, uint32(st), st.String())
	}
	require.True(t, StatusOperational.Operational())
	require.True(t, StatusInDeviceCreation.Operational())
	require.False(t, StatusInReset.Operational())
	require.True(t, StatusMalfunction.Broken())
	require.True(t, StatusNeedsReset.Broken())
	require.False(t, StatusInReset.Broken())
	require.Equal(t, "IN_RESET_AFTER_DEVICE_RELEASE", StatusInResetAfterDeviceRelease.String())
	require.Equal(t, "9", DeviceStatus(9).String())

	c := Chunk{Queue: 4, Handle: 0x1000, Size: 32, UserCB: true}
	require.Equal(t, hlsys.CSChunk{QueueIndex: 4, CBHandle: 0x1000, CBSize: 32, Flags: hlsys.CSChunkFlagsUserAllocCB}, c.raw())
	c.UserCB = false
	require.Zero(t, c.raw().Flags)
}
