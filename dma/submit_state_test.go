package dma

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestCSRefusalByDeviceState: EPERM from the CS ioctl is not always a
// parser refusal: hl_hw_queue_schedule_cs returns EPERM when the device
// stopped being operational before the CS was scheduled, and
// hl_cs_sanity_checks EBUSY when it was not operational to begin with.
// Submit reads DEVICE_STATUS to tell them apart. Before the fix every
// EPERM was ErrInvalid ("packet rejected by the driver's CB parser") and
// EBUSY ErrBusy.
func TestCSRefusalByDeviceState(t *testing.T) {
	for _, tc := range []struct {
		name        string
		model       Model
		errno       unix.Errno
		status      uint32
		want        error
		notWant     error
		malfunction bool
	}{
		{"gaudi1 parser refusal", ModelGaudi1, unix.EPERM, hlsys.DeviceStatusOperational, ErrInvalid, ErrNotOperational, false},
		{"gaudi1 EPERM in reset", ModelGaudi1, unix.EPERM, hlsys.DeviceStatusInReset, ErrNotOperational, ErrInvalid, false},
		{"gaudi1 EPERM malfunction", ModelGaudi1, unix.EPERM, hlsys.DeviceStatusMalfunction, ErrNotOperational, ErrInvalid, true},
		{"gaudi2 EPERM in reset", ModelGaudi2, unix.EPERM, hlsys.DeviceStatusInReset, ErrNotOperational, ErrInvalid, false},
		{"gaudi2 EPERM needs reset", ModelGaudi2, unix.EPERM, hlsys.DeviceStatusNeedsReset, ErrNotOperational, ErrInvalid, true},
		{"gaudi2 EPERM recovered", ModelGaudi2, unix.EPERM, hlsys.DeviceStatusOperational, ErrNotOperational, ErrInvalid, false},
		{"gaudi2 EPERM in creation", ModelGaudi2, unix.EPERM, hlsys.DeviceStatusInDeviceCreation, ErrNotOperational, ErrInvalid, false},
		{"EBUSY released", ModelGaudi2, unix.EBUSY, hlsys.DeviceStatusInResetAfterDeviceRelease, ErrNotOperational, ErrBusy, false},
		{"EBUSY operational", ModelGaudi1, unix.EBUSY, hlsys.DeviceStatusOperational, ErrBusy, ErrNotOperational, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, f := openFake(t, tc.model, hlsys.Accel, "6.8")
			f.mu.Lock()
			f.status = tc.status
			f.mu.Unlock()
			f.submit = func([]hlsys.CSChunk) (uint64, error) { return 0, tc.errno }
			_, err := d.Submit([]Chunk{{Handle: 0x1000, Queue: 0, Size: 8}})
			require.ErrorIs(t, err, tc.want)
			require.NotErrorIs(t, err, tc.notWant)
			require.ErrorIs(t, err, tc.errno, "the errno is kept")
			if tc.malfunction {
				require.ErrorIs(t, err, ErrMalfunction)
			} else {
				require.NotErrorIs(t, err, ErrMalfunction)
			}
		})
	}
}

// TestWaitRefusedByDeviceState: hl_wait_ioctl refuses every wait with
// EBUSY (EPERM on older drivers) while the device is not operational.
func TestWaitRefusedByDeviceState(t *testing.T) {
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	for _, errno := range []unix.Errno{unix.EBUSY, unix.EPERM} {
		f.mu.Lock()
		f.status = hlsys.DeviceStatusInReset
		f.mu.Unlock()
		f.wait = func(uint64, uint64) (hlsys.WaitCSOut, error) { return hlsys.WaitCSOut{}, errno }
		st, err := d.Wait(1, 0)
		require.Equal(t, CSUnknown, st)
		require.ErrorIs(t, err, ErrNotOperational)
		require.ErrorIs(t, err, errno)

		f.mu.Lock()
		f.status = hlsys.DeviceStatusOperational
		f.mu.Unlock()
		_, err = d.Wait(1, 0)
		require.NotErrorIs(t, err, ErrNotOperational)
		require.ErrorIs(t, err, errno)
	}
}

// TestCSRefusedWhileResettingHlsim: the emulator refuses CSs and waits
// while it is not operational (ForceStatus) as the driver does; the errors
// say the device is not operational, not that the packets were bad, and
// work resumes once it is operational again.
func TestCSRefusedWhileResettingHlsim(t *testing.T) {
	for _, m := range []hlsim.Model{hlsim.ModelGaudi1, hlsim.ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			sim, err := hlsim.New(hlsim.Config{Model: m, DRAMSize: 64 << 20})
			require.NoError(t, err)
			defer func() { require.NoError(t, sim.Close()) }()
			d, err := OpenBackend(sim.Name(), sim.Open, Options{})
			require.NoError(t, err)
			defer func() {
				sim.ForceStatus(hlsys.DeviceStatusOperational) // also when a check failed
				require.NoError(t, d.Close())
			}()
			mem, err := d.AllocDevice(1 << 20)
			require.NoError(t, err)

			cb, err := d.NewCB(4096)
			require.NoError(t, err)
			require.NoError(t, cb.AddMemset(mem.Addr(), 0, 4096))
			if m == hlsim.ModelGaudi2 {
				require.NoError(t, cb.AddNOP(EB|MB))
			}
			seq, err := d.Submit([]Chunk{cb.Chunk(d.D2DQueues()[0])})
			require.NoError(t, err)
			st, err := d.Wait(seq, 10*time.Second)
			require.NoError(t, err)
			require.Equal(t, CSCompleted, st)

			// The CB is built before: the driver refuses memory and CB
			// ioctls too while the device is not operational.
			chunk := []Chunk{cb.Chunk(d.D2DQueues()[0])}
			for _, status := range []uint32{hlsys.DeviceStatusInReset, hlsys.DeviceStatusMalfunction} {
				sim.ForceStatus(status)
				_, err = d.Submit(chunk)
				require.ErrorIs(t, err, ErrNotOperational, "CS while %d", status)
				require.NotErrorIs(t, err, ErrInvalid)
				require.Equal(t, status == hlsys.DeviceStatusMalfunction, isMalfunction(err))
				_, err = d.Wait(seq, 0)
				require.ErrorIs(t, err, ErrNotOperational, "wait while %d", status)
			}
			sim.ForceStatus(hlsys.DeviceStatusOperational)
			seq, err = d.Submit(chunk)
			require.NoError(t, err)
			st, err = d.Wait(seq, 10*time.Second)
			require.NoError(t, err)
			require.Equal(t, CSCompleted, st)
			require.NoError(t, cb.Close())
		})
	}
}

func isMalfunction(err error) bool { return errors.Is(err, ErrMalfunction) }

// TestMemoryOpsRefusedByDeviceState: hl_mem_ioctl and hl_cb_ioctl refuse
// every call with EBUSY while the device is not operational; the errors
// wrap ErrNotOperational then (before: ErrBusy, as for a DMA-BUF still
// open), and stay ErrBusy on an operational device.
func TestMemoryOpsRefusedByDeviceState(t *testing.T) {
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	m, err := d.AllocDevice(4096)
	require.NoError(t, err)
	f.memErr = func(*hlsys.MemArgs) error { return unix.EBUSY }
	for _, status := range []uint32{hlsys.DeviceStatusInReset, hlsys.DeviceStatusOperational} {
		f.mu.Lock()
		f.status = status
		f.mu.Unlock()
		want, notWant := ErrNotOperational, ErrBusy
		if status == hlsys.DeviceStatusOperational {
			want, notWant = ErrBusy, ErrNotOperational
		}
		_, err = d.AllocDevice(48 << 20) // a whole page: its own ALLOC (4096 would come from m's slab)
		require.ErrorIs(t, err, want, "alloc")
		require.NotErrorIs(t, err, notWant, "alloc")
		_, err = d.ExportDMABuf(m, 0, 4096)
		require.ErrorIs(t, err, want, "export")
		_, err = d.NewCB(4096)
		require.ErrorIs(t, err, want, "CB (Gaudi2: host pages mapped with MAP)")
		require.ErrorIs(t, err, unix.EBUSY)
	}
	f.memErr = nil
}

// TestMemoryOpsWhileResettingHlsim: the same against the emulator, both
// models (Gaudi1 CBs are kernel CBs: CB CREATE).
func TestMemoryOpsWhileResettingHlsim(t *testing.T) {
	for _, m := range []hlsim.Model{hlsim.ModelGaudi1, hlsim.ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			sim, err := hlsim.New(hlsim.Config{Model: m, DRAMSize: 64 << 20})
			require.NoError(t, err)
			defer func() { require.NoError(t, sim.Close()) }()
			d, err := OpenBackend(sim.Name(), sim.Open, Options{})
			require.NoError(t, err)
			defer func() {
				sim.ForceStatus(hlsys.DeviceStatusOperational)
				require.NoError(t, d.Close())
			}()
			sim.ForceStatus(hlsys.DeviceStatusInReset)
			_, err = d.AllocDevice(1 << 20)
			require.ErrorIs(t, err, ErrNotOperational)
			_, err = d.NewCB(4096)
			require.ErrorIs(t, err, ErrNotOperational)
			sim.ForceStatus(hlsys.DeviceStatusOperational)
			mem, err := d.AllocDevice(1 << 20)
			require.NoError(t, err)
			require.NoError(t, mem.Free())
		})
	}
}

// TestWaitCS: what a completion tracker learns from WaitCS, per WAIT_CS
// answer and device state. A refusal while the device resets keeps the CS
// (its outcome outlives the reset); a device in malfunction ends it.
func TestWaitCS(t *testing.T) {
	tests := []struct {
		name     string
		status   uint32
		out      hlsys.WaitCSOut
		errno    error
		wantDone bool
		wantErr  error
	}{
		{"completed", hlsys.DeviceStatusOperational, hlsys.WaitCSOut{Status: hlsys.WaitCSStatusCompleted}, nil, true, nil},
		{"busy", hlsys.DeviceStatusOperational, hlsys.WaitCSOut{Status: hlsys.WaitCSStatusBusy}, nil, false, nil},
		{"timed out", hlsys.DeviceStatusOperational, hlsys.WaitCSOut{Status: hlsys.WaitCSStatusTimedOut}, unix.ETIMEDOUT, true, ErrCSTimedOut},
		{"aborted", hlsys.DeviceStatusOperational, hlsys.WaitCSOut{Status: hlsys.WaitCSStatusAborted}, unix.EIO, true, ErrCSAborted},
		{"refused in reset", hlsys.DeviceStatusInReset, hlsys.WaitCSOut{}, unix.EBUSY, false, nil},
		{"refused in reset after release", hlsys.DeviceStatusInResetAfterDeviceRelease, hlsys.WaitCSOut{}, unix.EBUSY, false, nil},
		{"refused, reset over by the status read", hlsys.DeviceStatusOperational, hlsys.WaitCSOut{}, unix.EBUSY, false, nil},
		{"refused in malfunction", hlsys.DeviceStatusMalfunction, hlsys.WaitCSOut{}, unix.EBUSY, true, ErrMalfunction},
		{"refused, needs reset", hlsys.DeviceStatusNeedsReset, hlsys.WaitCSOut{}, unix.EBUSY, true, ErrMalfunction},
		{"unknown seq", hlsys.DeviceStatusOperational, hlsys.WaitCSOut{}, unix.EINVAL, true, unix.EINVAL},
		// The device was removed under the open fd: every ioctl on it
		// fails with ENODEV from then on (hl_ioctl, habanalabs_ioctl.c,
		// after device_disable_open_processes in device.c hl_device_fini).
		{"device removed", hlsys.DeviceStatusOperational, hlsys.WaitCSOut{}, unix.ENODEV, true, unix.ENODEV},
		// A backend that hands back the driver's EINTR (hl_cs_wait_ioctl:
		// "user process got signal while waiting for CS handle") on
		// every try: the CS was not seen ending.
		{"interrupted", hlsys.DeviceStatusOperational, hlsys.WaitCSOut{}, unix.EINTR, false, nil},
	}
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.mu.Lock()
			f.status = tt.status
			f.mu.Unlock()
			f.wait = func(uint64, uint64) (hlsys.WaitCSOut, error) { return tt.out, tt.errno }
			done, err := d.WaitCS(1, time.Millisecond)
			require.Equal(t, tt.wantDone, done)
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
		})
	}
	f.mu.Lock()
	f.status = hlsys.DeviceStatusOperational
	f.mu.Unlock()
	f.wait = nil
	require.NoError(t, d.Close())
	done, err := d.WaitCS(1, 0)
	require.True(t, done, "a closed device ends the CS")
	require.ErrorIs(t, err, ErrClosed)
}
