package dma

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// WAIT_CS and CS submission through the fake backend: errno mapping,
// timeout conversion, retries.

func TestWaitMapping(t *testing.T) {
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	type reply struct {
		out hlsys.WaitCSOut
		err error
	}
	for _, tt := range []struct {
		name string
		r    reply
		want CSStatus
		is   []error
	}{
		{"completed", reply{hlsys.WaitCSOut{Status: hlsys.WaitCSStatusCompleted}, nil}, CSCompleted, nil},
		{"completed, timestamp", reply{hlsys.WaitCSOut{Status: hlsys.WaitCSStatusCompleted, Flags: hlsys.WaitCSStatusFlagTimestampVld}, nil}, CSCompleted, nil},
		// A gone fence without a stored outcome: how it ended is unknown.
		{"gone", reply{hlsys.WaitCSOut{Status: hlsys.WaitCSStatusCompleted, Flags: hlsys.WaitCSStatusFlagGone}, nil}, CSUnknown, []error{ErrCSOutcomeLost}},
		{"busy", reply{hlsys.WaitCSOut{Status: hlsys.WaitCSStatusBusy}, nil}, CSBusy, nil},
		{"timedout", reply{hlsys.WaitCSOut{Status: hlsys.WaitCSStatusTimedOut}, unix.ETIMEDOUT}, CSTimedOut, []error{ErrCSTimedOut, unix.ETIMEDOUT}},
		{"aborted", reply{hlsys.WaitCSOut{Status: hlsys.WaitCSStatusAborted}, unix.EIO}, CSAborted, []error{ErrCSAborted, unix.EIO}},
		{"timedout status only", reply{hlsys.WaitCSOut{Status: hlsys.WaitCSStatusTimedOut}, nil}, CSTimedOut, []error{ErrCSTimedOut}},
		{"aborted status only", reply{hlsys.WaitCSOut{Status: hlsys.WaitCSStatusAborted}, nil}, CSAborted, []error{ErrCSAborted}},
		{"einval", reply{hlsys.WaitCSOut{}, unix.EINVAL}, CSUnknown, []error{ErrInvalid, unix.EINVAL}},
		{"ebusy", reply{hlsys.WaitCSOut{}, unix.EBUSY}, CSUnknown, []error{unix.EBUSY}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.wait = func(seq, tmo uint64) (hlsys.WaitCSOut, error) { return tt.r.out, tt.r.err }
			st, err := d.Wait(3, time.Millisecond)
			require.Equal(t, tt.want, st)
			if tt.is == nil {
				require.NoError(t, err)
			}
			for _, e := range tt.is {
				require.ErrorIs(t, err, e)
			}
		})
	}
	_, err := d.Wait(0, 0)
	require.ErrorIs(t, err, ErrInvalid)
}

func TestWaitTimeoutConversion(t *testing.T) {
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	var got []uint64
	f.wait = func(seq, tmo uint64) (hlsys.WaitCSOut, error) {
		got = append(got, tmo)
		return hlsys.WaitCSOut{Status: hlsys.WaitCSStatusBusy}, nil
	}
	st, err := d.Wait(1, 9000*time.Second)
	require.NoError(t, err)
	require.Equal(t, CSBusy, st)
	require.Equal(t, []uint64{4000e6, 4000e6, 1000e6}, got, "long timeouts are split below the driver's u32 limit")

	got = nil
	_, _ = d.Wait(1, 0)
	_, _ = d.Wait(1, -time.Second)
	_, _ = d.Wait(1, 1500*time.Microsecond)
	require.Equal(t, []uint64{0, 0, 1500}, got)

	// EINTR is retried.
	n := 0
	f.wait = func(seq, tmo uint64) (hlsys.WaitCSOut, error) {
		n++
		if n < 3 {
			return hlsys.WaitCSOut{}, unix.EINTR
		}
		return hlsys.WaitCSOut{}, nil
	}
	st, err = d.Wait(1, time.Second)
	require.NoError(t, err)
	require.Equal(t, CSCompleted, st)
	require.Equal(t, 3, n)
}

func TestSubmitRetries(t *testing.T) {
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	chunk := []Chunk{{Handle: 0x1000, Queue: 0, Size: 8, UserCB: true}}

	n := 0
	f.submit = func([]hlsys.CSChunk) (uint64, error) {
		n++
		switch n {
		case 1, 2:
			return 0, unix.EAGAIN
		case 3:
			return 0, unix.EINTR
		}
		return 42, nil
	}
	seq, err := d.Submit(chunk)
	require.NoError(t, err)
	require.Equal(t, uint64(42), seq)
	require.Equal(t, uint64(3), d.Stats().SubmitRetries)
	require.Equal(t, uint64(1), d.Stats().Submitted)

	f.submit = func([]hlsys.CSChunk) (uint64, error) { return 0, unix.EAGAIN }
	d.opts.SubmitRetries = 5
	_, err = d.Submit(chunk)
	require.ErrorIs(t, err, ErrBusy)
	require.ErrorIs(t, err, unix.EAGAIN)
	require.Equal(t, uint64(8), d.Stats().SubmitRetries)

	f.submit = func([]hlsys.CSChunk) (uint64, error) { return 0, unix.EINVAL }
	_, err = d.Submit(chunk)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, err, unix.EINVAL)
	f.submit = func([]hlsys.CSChunk) (uint64, error) { return 0, unix.EPERM }
	_, err = d.Submit(chunk)
	require.ErrorIs(t, err, ErrNotOperational, "Gaudi2 has no packet parser: EPERM is the device state (see TestCSRefusalByDeviceState)")
	require.ErrorIs(t, err, unix.EPERM)

	_, err = d.Submit(nil)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = d.Submit(make([]Chunk, MaxChunksPerCS+1))
	require.ErrorIs(t, err, ErrInvalid)
}

// TestSubmitCtxSwitchTimeout: the CS ioctl fails with ETIMEDOUT when its
// context-switch phase times out (hl_cs_ctx_switch, command_submission.c:
// "context switch phase timeout", or the ASIC's context_switch timing
// out), before hl_cs_ioctl submits the CS: it never ran. Its error must
// not say that the device's CS timeout expired for it (ErrCSTimedOut),
// and no other call's ETIMEDOUT may either.
func TestSubmitCtxSwitchTimeout(t *testing.T) {
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	f.submit = func([]hlsys.CSChunk) (uint64, error) { return 0, unix.ETIMEDOUT }
	_, err := d.Submit([]Chunk{{Handle: 0x1000, Queue: 0, Size: 8, UserCB: true}})
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrCSTimedOut, "the CS was never submitted")
	require.ErrorIs(t, err, ErrBusy)
	require.ErrorIs(t, err, unix.ETIMEDOUT)
	require.Contains(t, err.Error(), "not submitted")
	require.Zero(t, d.Stats().Submitted)

	require.NotErrorIs(t, wrapErr("map memory", unix.ETIMEDOUT), ErrCSTimedOut)
}

// TestWaitEINTRReissuesWithTimeLeft: the driver ends a WAIT_CS that a
// signal interrupts with -EINTR (hl_cs_wait_ioctl, command_submission.c:
// "user process got signal while waiting for CS handle"). Wait issues it
// again for the time left, not for its whole timeout: signals arriving
// faster than the timeout must not keep a Wait from ending. A poll
// (timeout 0) does not sleep in the driver (_hl_cs_wait_ioctl:
// completion_done) and so is never interrupted.
func TestWaitEINTRReissuesWithTimeLeft(t *testing.T) {
	const gap = 2 * time.Millisecond // a WAIT_CS is interrupted after at least this long
	const gapUs = uint64(gap / time.Microsecond)
	tests := []struct {
		name    string
		timeout time.Duration
		intr    int // WAIT_CSs interrupted (-1: every one that sleeps)
		calls   int // WAIT_CSs expected (0: do not check)
	}{
		{"interrupted 3 times", time.Second, 3, 4},
		{"interrupted until the timeout", 5 * time.Millisecond, -1, 0},
	}
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []uint64
			f.wait = func(seq, tmo uint64) (hlsys.WaitCSOut, error) {
				got = append(got, tmo)
				if tmo > 0 && (tt.intr < 0 || len(got) <= tt.intr) && len(got) < 50 {
					time.Sleep(gap)
					return hlsys.WaitCSOut{}, unix.EINTR
				}
				return hlsys.WaitCSOut{Status: hlsys.WaitCSStatusBusy}, nil
			}
			st, err := d.Wait(1, tt.timeout)
			require.NoError(t, err)
			require.Equal(t, CSBusy, st)
			require.Equal(t, uint64(tt.timeout/time.Microsecond), got[0])
			for i := 1; i < len(got); i++ {
				require.LessOrEqual(t, got[i], got[i-1]-min(got[i-1], gapUs),
					"WAIT_CS %d after an interrupted one waits for the time left: %v", i, got)
			}
			if tt.calls > 0 {
				require.Len(t, got, tt.calls)
			} else {
				require.Zero(t, got[len(got)-1], "the time used up, the last WAIT_CS polls: %v", got)
				require.LessOrEqual(t, len(got), int(tt.timeout/gap)+2, "%v", got)
			}
		})
	}
	f.wait = nil
}
