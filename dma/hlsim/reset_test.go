package hlsim

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// The tests of the driver's TDR and conditional reset (reset.go, RULES.md
// R rows).

// registerEventFD registers a fresh non-blocking eventfd with the rig's
// context; it is closed at cleanup.
func registerEventFD(t testing.TB, r *rig) int {
	t.Helper()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(efd) })
	require.NoError(t, hlsys.RegisterEventFD(r.b, efd))
	return efd
}

// waitEvent waits up to timeout for the eventfd to be signalled and
// consumes the count.
func waitEvent(t testing.TB, efd int, timeout time.Duration) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		require.Positive(t, left, "no event within %v", timeout)
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		require.NoError(t, err)
		if n > 0 {
			var v [8]byte
			_, err := unix.Read(efd, v[:])
			require.NoError(t, err)
			require.NotZero(t, binary.NativeEndian.Uint64(v[:]))
			return
		}
	}
}

// killHook returns a Config.Kill that reports each call on the channel.
func killHook() (func(), <-chan struct{}) {
	ch := make(chan struct{}, 8)
	return func() { ch <- struct{}{} }, ch
}

func recvKill(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(safety):
		t.Fatal("the process was not killed")
	}
}

// resetCount reads INFO RESET_COUNT through b.
func resetCount(t *testing.T, b hlsys.Backend) uint32 {
	t.Helper()
	rc := outBuf(t, 8)
	a := hlsys.InfoArgs{ReturnPointer: addrOf(rc), ReturnSize: 8, Op: hlsys.InfoResetCount}
	require.NoError(t, hlsys.Info(b, &a))
	return binary.LittleEndian.Uint32(rc)
}

// TestTDRWithEventFD (R1-R5): a TDR with an eventfd registered arms the
// release watchdog: DEVICE_RESET|CS_TIMEOUT posted and signalled, every
// fence in flight completed -EIO (the timed-out CS's too) while the
// engines go on, WAIT_CS EBUSY for every sequence number, CS/MEMORY/CB/
// INFO accepted, the device OPERATIONAL. Releasing the context within the
// watchdog hard-resets without a kill; the device opens again.
func TestTDRWithEventFD(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			// The TDR must fire after both waiters block (else they get
			// EBUSY, the watchdog armed) and before the delayed CS ends:
			// margins of 500 ms and 1 s for a loaded machine.
			r := newRig(t, Config{Model: m, CSTimeout: 500 * time.Millisecond, ReleaseWatchdog: time.Hour})
			efd := registerEventFD(t, r)
			first, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			r.drain()

			r.d.HangNextCS(1) // the oldest in flight: its TDR fires
			hung, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			cb, src, dst := r.copyCB()
			r.d.DelayNextCS(1, 1500*time.Millisecond) // runs now, completes after the TDR
			other, err := r.submit(hlsys.CSFlagsCustomTimeout, 3600, r.chunk(4, cb))
			require.NoError(t, err)
			w1 := waitAsync(r.b, hung, uint64(safety.Microseconds()))
			w2 := waitAsync(r.b, other, uint64(safety.Microseconds()))
			blockedWaiters(t, r.b, 2)
			for _, w := range []<-chan waitResult{w1, w2} {
				res := recvWait(t, w)
				isErrno(t, res.err, unix.EIO)
				require.Equal(t, uint32(hlsys.WaitCSStatusAborted), res.out.Status)
			}
			waitEvent(t, efd, safety)
			ev, err := hlsys.GetEvents(r.b)
			require.NoError(t, err)
			require.Equal(t, uint64(hlsys.NotifierCSTimeout|hlsys.NotifierDeviceReset), ev)
			require.Equal(t, src, dst, "the other CS ran: the engines were not stopped")

			status, err := hlsys.GetDeviceStatus(r.b)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.DeviceStatusOperational), status)
			for _, seq := range []uint64{first, hung, other} {
				_, err = hlsys.WaitForCS(r.b, seq, 0)
				isErrno(t, err, unix.EBUSY)
			}
			// CS, MEMORY and CB are accepted; the engines run the CS.
			cb2, src2, dst2 := r.copyCB()
			_, err = r.submit(0, 0, r.chunk(1, cb2))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return string(src2) == string(dst2) }, safety, time.Millisecond)
			_, err = hlsys.MemAlloc(r.b, 4096, 0, 0)
			require.NoError(t, err)
			_, err = hlsys.CBCreate(r.b, 4096, 0)
			require.NoError(t, err)
			require.Zero(t, resetCount(t, r.b), "arming the watchdog is no reset")

			// The delayed CS's real end counts nothing twice.
			require.Eventually(t, func() bool { return r.d.Stats().CSCompleted == 2 }, safety, time.Millisecond)
			time.Sleep(400 * time.Millisecond)
			st := r.d.Stats()
			require.Equal(t, uint64(2), st.CSAborted, "%+v", st)
			require.Equal(t, uint64(2), st.CSCompleted, "%+v", st)
			_, err = r.d.Open()
			isErrno(t, err, unix.EBUSY)

			// The release within the watchdog: a hard reset, no kill.
			require.NoError(t, r.b.Close())
			st = r.d.Stats()
			require.Equal(t, uint64(1), st.Resets)
			require.Zero(t, st.Kills)
			require.Equal(t, st.CSSubmitted, st.CSCompleted+st.CSAborted+st.CSTimedOut, "%+v", st)
			b2, err := r.d.open()
			require.NoError(t, err)
			defer b2.Close()
			require.Equal(t, uint32(1), resetCount(t, b2))
			u, err := hlsys.GetDramUsage(b2)
			require.NoError(t, err)
			require.Zero(t, u.CtxDramMem)
			time.Sleep(killGrace + 100*time.Millisecond)
			require.Zero(t, r.d.Stats().Kills)
		})
	}
}

// TestTDRWithoutEventFD (R6): no eventfd, no watchdog: the TDR hard-resets
// at once: IN_RESET, the timed-out CS's waiter ETIMEDOUT, the others EIO;
// 1 s later the holder is killed; the killed context answers ENODEV; the
// device opens again once it is closed.
func TestTDRWithoutEventFD(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			kill, killed := killHook()
			r := newRig(t, Config{Model: m, CSTimeout: 50 * time.Millisecond, Kill: kill})
			spare := r.chunk(1, nop())
			r.d.HangNextCS(1)
			hung, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			r.d.DelayNextCS(1, time.Hour)
			other, err := r.submit(hlsys.CSFlagsCustomTimeout, 3600, r.chunk(4, nop()))
			require.NoError(t, err)
			w := waitAsync(r.b, other, uint64(safety.Microseconds()))
			out, err := hlsys.WaitForCS(r.b, hung, uint64(safety.Microseconds()))
			start := time.Now()
			isErrno(t, err, unix.ETIMEDOUT)
			require.Equal(t, uint32(hlsys.WaitCSStatusTimedOut), out.Status)
			res := recvWait(t, w)
			isErrno(t, res.err, unix.EIO)
			require.Equal(t, uint32(hlsys.WaitCSStatusAborted), res.out.Status)

			status, err := hlsys.GetDeviceStatus(r.b)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.DeviceStatusInReset), status)
			_, err = r.submit(0, 0, spare)
			isErrno(t, err, unix.EBUSY)
			_, err = r.d.Open()
			isErrno(t, err, unix.EAGAIN)

			recvKill(t, killed)
			require.GreaterOrEqual(t, time.Since(start), killGrace-100*time.Millisecond, "killed before the grace second")
			_, err = hlsys.GetDeviceStatus(r.b)
			isErrno(t, err, unix.ENODEV)
			_, err = hlsys.WaitForCS(r.b, hung, 0)
			isErrno(t, err, unix.ENODEV)
			_, err = r.d.Open()
			isErrno(t, err, unix.EAGAIN)
			st := r.d.Stats()
			require.Equal(t, uint64(1), st.Kills)
			require.Equal(t, uint64(1), st.Resets)
			require.Equal(t, uint64(1), st.CSTimedOut)
			require.Equal(t, uint64(1), st.CSAborted)

			require.NoError(t, r.b.Close())
			require.Eventually(t, func() bool {
				b, err := r.d.Open()
				if err == nil {
					_ = b.Close()
				}
				return err == nil
			}, safety, time.Millisecond)
		})
	}
}

// TestWatchdogExpires (R5): without a release the watchdog hard-resets
// and kills.
func TestWatchdogExpires(t *testing.T) {
	kill, killed := killHook()
	r := newRig(t, Config{CSTimeout: 30 * time.Millisecond, ReleaseWatchdog: 50 * time.Millisecond, Kill: kill})
	efd := registerEventFD(t, r)
	r.d.HangNextCS(1)
	_, err := r.submit(0, 0, r.chunk(0, nop()))
	require.NoError(t, err)
	waitEvent(t, efd, safety)
	recvKill(t, killed)
	_, err = hlsys.GetDeviceStatus(r.b)
	isErrno(t, err, unix.ENODEV)
	require.Equal(t, uint64(1), r.d.Stats().Resets)
	require.NoError(t, r.b.Close())
	require.Eventually(t, func() bool {
		return r.d.status.Load() == hlsys.DeviceStatusOperational
	}, safety, time.Millisecond)
}

// TestTDRUnderWatchdog (R7): a TDR while the watchdog runs, the eventfd
// meanwhile unregistered, does not reset at once; CS_TIMEOUT is posted
// for the first TDR since the open only.
func TestTDRUnderWatchdog(t *testing.T) {
	r := newRig(t, Config{CSTimeout: 30 * time.Millisecond, ReleaseWatchdog: time.Hour})
	efd := registerEventFD(t, r)
	r.d.DelayNextCS(1, 80*time.Millisecond) // times out, then ends
	_, err := r.submit(0, 0, r.chunk(0, nop()))
	require.NoError(t, err)
	waitEvent(t, efd, safety)
	ev, err := hlsys.GetEvents(r.b)
	require.NoError(t, err)
	require.Equal(t, uint64(hlsys.NotifierCSTimeout|hlsys.NotifierDeviceReset), ev)
	require.NoError(t, hlsys.UnregisterEventFD(r.b))
	c := r.b.(*hctx)
	require.Eventually(t, func() bool { return !c.inFlight() }, safety, time.Millisecond)

	r.d.HangNextCS(1) // first on the mirror list: its TDR is armed
	_, err = r.submit(0, 0, r.chunk(0, nop()))
	require.NoError(t, err)
	for deadline := time.Now().Add(safety); ; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "no event of the second TDR")
		ev, err := hlsys.GetEvents(r.b)
		require.NoError(t, err)
		if ev != 0 {
			require.Equal(t, uint64(hlsys.NotifierDeviceReset), ev, "CS_TIMEOUT only for the first TDR")
			break
		}
	}
	status, err := hlsys.GetDeviceStatus(r.b)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.DeviceStatusOperational), status)
	require.Zero(t, r.d.Stats().Resets)
	require.NoError(t, r.b.Close())
	require.Equal(t, uint64(1), r.d.Stats().Resets)
	require.Zero(t, r.d.Stats().Kills)
}

// TestReset (R9): Device.Reset is the conditional reset of a fatal error.
func TestReset(t *testing.T) {
	t.Run("no context", func(t *testing.T) {
		d, err := New(Config{Kill: func() { t.Error("killed") }})
		require.NoError(t, err)
		defer d.Close()
		d.Reset()
		require.Equal(t, uint64(1), d.Stats().Resets)
		b, err := d.Open()
		require.NoError(t, err)
		require.NoError(t, b.Close())
	})
	for _, m := range models {
		t.Run(m.String()+"/eventfd", func(t *testing.T) {
			r := newRig(t, Config{Model: m, ReleaseWatchdog: time.Hour})
			efd := registerEventFD(t, r)
			r.d.DelayNextCS(2, time.Hour)
			s1, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			_, err = r.submit(0, 0, r.chunk(4, nop()))
			require.NoError(t, err)
			w1 := waitAsync(r.b, s1, uint64(safety.Microseconds()))
			blockedWaiters(t, r.b, 1)
			r.d.Reset()
			res := recvWait(t, w1)
			isErrno(t, res.err, unix.EIO)
			require.Equal(t, uint32(hlsys.WaitCSStatusAborted), res.out.Status)
			waitEvent(t, efd, safety)
			ev, err := hlsys.GetEvents(r.b)
			require.NoError(t, err)
			require.Equal(t, uint64(hlsys.NotifierDeviceReset), ev)
			_, err = hlsys.WaitForCS(r.b, s1, 0)
			isErrno(t, err, unix.EBUSY)
			require.Equal(t, uint64(2), r.d.Stats().CSAborted)
			require.Zero(t, r.d.Stats().Resets)
			require.NoError(t, r.b.Close())
			require.Equal(t, uint64(1), r.d.Stats().Resets)
			require.Zero(t, r.d.Stats().Kills)
		})
		t.Run(m.String()+"/no_eventfd", func(t *testing.T) {
			kill, killed := killHook()
			r := newRig(t, Config{Model: m, Kill: kill})
			spare := r.chunk(1, nop())
			r.d.DelayNextCS(1, time.Hour)
			s1, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			w1 := waitAsync(r.b, s1, uint64(safety.Microseconds()))
			blockedWaiters(t, r.b, 1)
			r.d.Reset()
			res := recvWait(t, w1)
			isErrno(t, res.err, unix.EIO)
			require.Equal(t, uint32(hlsys.WaitCSStatusAborted), res.out.Status)
			recvKill(t, killed)
			_, err = r.submit(0, 0, spare)
			isErrno(t, err, unix.ENODEV)
		})
	}
}

// TestSkipResetOnTimeout (R8): the TDR of a CS with
// CS_FLAGS_SKIP_RESET_ON_TIMEOUT posts CS_TIMEOUT and nothing more: the CS
// stays in flight and ends COMPLETED when the hardware finishes it.
func TestSkipResetOnTimeout(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m, CSTimeout: 30 * time.Millisecond})
			efd := registerEventFD(t, r)
			r.d.DelayNextCS(1, 300*time.Millisecond)
			seq, err := r.submit(hlsys.CSFlagsSkipResetOnTimeout|hlsys.CSFlagsTimestamp, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			waitEvent(t, efd, safety)
			ev, err := hlsys.GetEvents(r.b)
			require.NoError(t, err)
			require.Equal(t, uint64(hlsys.NotifierCSTimeout), ev)
			out, err := hlsys.WaitForCS(r.b, seq, 0)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status)
			out, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			require.Equal(t, uint32(hlsys.WaitCSStatusFlagTimestampVld), out.Flags)
			st := r.d.Stats()
			require.Zero(t, st.Resets)
			require.Equal(t, uint64(1), st.CSCompleted)
			require.Zero(t, st.CSTimedOut)
		})
	}
}

// TestNoResetOnLockup (R10): reset_on_lockup=0: the TDR sets needs_reset;
// DEVICE_STATUS reads NEEDS_RESET, CS/WAIT_CS/MEMORY/CB and
// REGISTER_EVENTFD are EBUSY, open EPERM; a waiter already blocked is not
// aborted: the CS ends -ETIMEDOUT when the hardware finishes it; the
// release resets the device.
func TestNoResetOnLockup(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m, CSTimeout: 30 * time.Millisecond, NoResetOnLockup: true})
			efd := registerEventFD(t, r)
			spare := r.chunk(1, nop())
			r.d.DelayNextCS(1, 300*time.Millisecond)
			seq, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			r.d.HangNextCS(1)
			hung, err := r.submit(0, 0, r.chunk(4, nop()))
			require.NoError(t, err)
			w := waitAsync(r.b, seq, uint64(safety.Microseconds()))
			blockedWaiters(t, r.b, 1)
			waitEvent(t, efd, safety)
			ev, err := hlsys.GetEvents(r.b)
			require.NoError(t, err)
			require.Equal(t, uint64(hlsys.NotifierCSTimeout), ev)

			status, err := hlsys.GetDeviceStatus(r.b)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.DeviceStatusNeedsReset), status)
			_, err = r.submit(0, 0, spare)
			isErrno(t, err, unix.EBUSY)
			_, err = hlsys.WaitForCS(r.b, hung, 0)
			isErrno(t, err, unix.EBUSY)
			_, err = hlsys.MemAlloc(r.b, 4096, 0, 0)
			isErrno(t, err, unix.EBUSY)
			_, err = hlsys.CBCreate(r.b, 4096, 0)
			isErrno(t, err, unix.EBUSY)
			ia := hlsys.InfoArgs{Op: hlsys.InfoRegisterEventFD, Arg: uint32(efd)}
			isErrno(t, hlsys.Info(r.b, &ia), unix.EBUSY)
			_, err = r.d.Open()
			isErrno(t, err, unix.EPERM)

			res := recvWait(t, w)
			isErrno(t, res.err, unix.ETIMEDOUT)
			require.Equal(t, uint32(hlsys.WaitCSStatusTimedOut), res.out.Status)
			require.Zero(t, r.d.Stats().Resets)

			require.NoError(t, r.b.Close()) // the hung CS holds the context: a hard reset
			st := r.d.Stats()
			require.Equal(t, uint64(1), st.Resets)
			require.Zero(t, st.Kills)
			b, err := r.d.Open()
			require.NoError(t, err)
			require.NoError(t, b.Close())
		})
	}
}
