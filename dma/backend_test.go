package dma

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

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

// plainBackend has only the methods of Backend: no numbering of its own.
type plainBackend struct{ f *fakeBackend }

func (p plainBackend) Ioctl(req uintptr, arg unsafe.Pointer) error { return p.f.Ioctl(req, arg) }
func (p plainBackend) Mmap(off int64, n int) ([]byte, error)       { return p.f.Mmap(off, n) }
func (p plainBackend) Munmap(b []byte) error                       { return p.f.Munmap(b) }
func (p plainBackend) Close() error                                { return p.f.Close() }
func (p plainBackend) Name() string                                { return p.f.Name() }
func (p plainBackend) Emulated() bool                              { return p.f.Emulated() }

// TestBackendNumberingByName: a Backend without a numbering of its own is
// numbered by its name (accel nodes take the DRM numbers).
func TestBackendNumberingByName(t *testing.T) {
	tests := []struct {
		name    string
		num     hlsys.Numbering // what the fake answers
		want    Numbering
		wantErr bool
	}{
		{"/dev/accel/accel3", hlsys.Accel, NumberingAccel, false},
		{"/dev/hl3", hlsys.Legacy, NumberingLegacy, false},
		{"some backend", hlsys.Legacy, NumberingLegacy, false},
		{"some backend", hlsys.Accel, 0, true}, // numbered legacy by its name: the fake refuses
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(ModelGaudi2, tt.num)
			f.name = tt.name
			var b Backend = plainBackend{f}
			_, isDriver := b.(hlsys.Backend)
			require.False(t, isDriver)
			d, err := NewDevice(b, Options{})
			if tt.wantErr {
				require.ErrorIs(t, err, unix.ENOTTY)
				require.Equal(t, 1, f.closeCount())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, d.Numbering())
			require.Equal(t, b, d.Backend())
			require.NoError(t, d.Close())
		})
	}
}
