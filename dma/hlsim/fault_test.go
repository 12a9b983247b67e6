package hlsim

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// waitAsync runs WaitForCS on another goroutine.
func waitAsync(b hlsys.Backend, seq, timeoutUs uint64) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		out, err := hlsys.WaitForCS(b, seq, timeoutUs)
		ch <- waitResult{out, err}
	}()
	return ch
}

// blockedWaiters waits until n WAIT_CS calls are blocked in the context.
func blockedWaiters(t *testing.T, b hlsys.Backend, n int32) {
	t.Helper()
	c := b.(*hctx)
	deadline := time.Now().Add(safety)
	for c.waiting.Load() < n {
		if time.Now().After(deadline) {
			t.Fatal("waiters did not block")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

type waitResult struct {
	out hlsys.WaitCSOut
	err error
}

func recvWait(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(safety):
		t.Fatal("WAIT_CS did not return")
		return waitResult{}
	}
}

// copyCB returns a 4 KiB copy between fresh host buffers and the buffers.
func (r *rig) copyCB() (cb, src, dst []byte) {
	src, sva := r.host(4096)
	dst, dva := r.host(4096)
	copy(src, pattern(4096, 11))
	return linDMA(r.g1, dva, sva, 4096), src, dst
}

func TestDelayNextCS(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			cb, src, dst := r.copyCB()
			r.d.DelayNextCS(1, 30*time.Millisecond)
			seq, err := r.submit(0, 0, r.chunk(0, cb))
			require.NoError(t, err)
			out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			require.Equal(t, src, dst, "a delayed CS executes before completing")

			// Only one CS was delayed; DelayNextCS(0, ...) cancels.
			r.d.DelayNextCS(5, time.Hour)
			r.d.DelayNextCS(0, 0)
			r.mustRun(nop())
		})
	}
}

func TestAbortNextCS(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			cb, _, dst := r.copyCB()
			r.d.AbortNextCS(1)
			out, err := r.run(cb)
			isErrno(t, err, unix.EIO)
			require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
			require.Equal(t, make([]byte, 4096), dst, "an aborted CS moves nothing")
			r.mustRun(cb)
			st := r.d.Stats()
			require.Equal(t, uint64(1), st.CSAborted)
			require.Equal(t, uint64(1), st.CSCompleted)
			require.Equal(t, uint64(2), st.CSSubmitted)
		})
	}
}

func TestHangNextCSResets(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m, CSTimeout: 50 * time.Millisecond})
			efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
			require.NoError(t, err)
			defer unix.Close(efd)
			require.NoError(t, hlsys.RegisterEventFD(r.b, efd))

			// The hung CS is the oldest in flight: the TDR watches it.
			r.d.HangNextCS(1)
			cb, _, dst := r.copyCB()
			seq, err := r.submit(0, 0, r.chunk(0, cb))
			require.NoError(t, err)
			// Another CS in flight after it, with a long custom timeout:
			// the reset caused by the hung CS aborts it.
			r.d.DelayNextCS(1, time.Hour)
			other, err := r.submit(hlsys.CSFlagsCustomTimeout, 3600, r.chunk(4, nop()))
			require.NoError(t, err)
			otherDone := waitAsync(r.b, other, uint64(safety.Microseconds()))

			out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
			isErrno(t, err, unix.ETIMEDOUT)
			require.Equal(t, uint32(hlsys.WaitCSStatusTimedOut), out.Status)
			require.Equal(t, make([]byte, 4096), dst, "a hung CS never ran")

			res := recvWait(t, otherDone)
			isErrno(t, res.err, unix.EIO)
			require.Equal(t, uint32(hlsys.WaitCSStatusAborted), res.out.Status)

			var v [8]byte
			_, err = unix.Read(efd, v[:])
			require.NoError(t, err)
			require.NotZero(t, binary.NativeEndian.Uint64(v[:]))
			ev, err := hlsys.GetEvents(r.b)
			require.NoError(t, err)
			require.Equal(t, uint64(hlsys.NotifierCSTimeout|hlsys.NotifierDeviceReset), ev)
			st := r.d.Stats()
			require.Equal(t, uint64(1), st.Resets)
			require.Equal(t, uint64(1), st.CSTimedOut)
			require.Equal(t, uint64(1), st.CSAborted)

			// The context survives the reset with its mappings.
			status, err := hlsys.GetDeviceStatus(r.b)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.DeviceStatusOperational), status)
			r.mustRun(cb)
			require.Equal(t, pattern(4096, 11), dst)
		})
	}
}

func TestHangWithoutReset(t *testing.T) {
	cases := map[string]struct {
		cfg   Config
		flags uint32
	}{
		"SKIP_RESET_ON_TIMEOUT": {Config{CSTimeout: 50 * time.Millisecond}, hlsys.CSFlagsSkipResetOnTimeout},
		"NoResetOnLockup":       {Config{CSTimeout: 50 * time.Millisecond, NoResetOnLockup: true}, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, tc.cfg)
			r.d.HangNextCS(1)
			seq, err := r.submit(tc.flags, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			r.d.DelayNextCS(1, time.Hour)
			other, err := r.submit(hlsys.CSFlagsCustomTimeout, 3600, r.chunk(4, nop()))
			require.NoError(t, err)

			out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
			isErrno(t, err, unix.ETIMEDOUT)
			require.Equal(t, uint32(hlsys.WaitCSStatusTimedOut), out.Status)

			out, err = hlsys.WaitForCS(r.b, other, 0)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status, "no reset: the other CS is still in flight")
			require.Zero(t, r.d.Stats().Resets)
			ev, err := hlsys.GetEvents(r.b)
			require.NoError(t, err)
			require.Equal(t, uint64(hlsys.NotifierCSTimeout), ev)
		})
	}
}

func TestCustomTimeout(t *testing.T) {
	r := newRig(t, Config{CSTimeout: time.Hour})
	r.d.HangNextCS(1)
	// CUSTOM_TIMEOUT of 0 seconds: the TDR fires at once.
	seq, err := r.submit(hlsys.CSFlagsCustomTimeout|hlsys.CSFlagsSkipResetOnTimeout, 0, r.chunk(0, nop()))
	require.NoError(t, err)
	out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	isErrno(t, err, unix.ETIMEDOUT)
	require.Equal(t, uint32(hlsys.WaitCSStatusTimedOut), out.Status)
}

func TestReset(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			cb, src, dst := r.copyCB()
			r.d.DelayNextCS(2, time.Hour)
			s1, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			s2, err := r.submit(0, 0, r.chunk(4, nop()))
			require.NoError(t, err)
			w1 := waitAsync(r.b, s1, uint64(safety.Microseconds()))
			blockedWaiters(t, r.b, 1)
			r.d.Reset()
			res := recvWait(t, w1)
			isErrno(t, res.err, unix.EIO)
			require.Equal(t, uint32(hlsys.WaitCSStatusAborted), res.out.Status)
			out, err := hlsys.WaitForCS(r.b, s2, 0)
			isErrno(t, err, unix.EIO)
			require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)

			status, err := hlsys.GetDeviceStatus(r.b)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.DeviceStatusOperational), status)
			rc := outBuf(t, 8)
			a := hlsys.InfoArgs{ReturnPointer: addrOf(rc), ReturnSize: 8, Op: hlsys.InfoResetCount}
			require.NoError(t, hlsys.Info(r.b, &a))
			require.Equal(t, uint32(1), binary.LittleEndian.Uint32(rc))

			// Memory mappings and CBs survive; sequence numbers go on.
			seq, err := r.submit(0, 0, r.chunk(0, cb))
			require.NoError(t, err)
			require.Equal(t, s2+1, seq)
			_, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
			require.NoError(t, err)
			require.Equal(t, src, dst)
		})
	}
}

// TestCloseWithWorkInFlight: closing the context with CSs in flight and a
// blocked WAIT_CS neither hangs nor leaks (TestMain checks goroutines and
// fds); the waiter gets -EIO, later calls os.ErrClosed, and the device
// opens again.
func TestCloseWithWorkInFlight(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
			require.NoError(t, err)
			defer unix.Close(efd)
			require.NoError(t, hlsys.RegisterEventFD(r.b, efd))
			r.dram(8 << 20)
			_, err = hlsys.CBCreate(r.b, 4096, 0)
			require.NoError(t, err)

			r.d.DelayNextCS(1, time.Hour)
			s1, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			r.d.HangNextCS(1)
			s2, err := r.submit(0, 0, r.chunk(1, nop()))
			require.NoError(t, err)
			w1 := waitAsync(r.b, s1, 1<<63-1) // without limit
			w2 := waitAsync(r.b, s2, uint64(safety.Microseconds()))
			blockedWaiters(t, r.b, 2)

			require.NoError(t, r.b.Close())
			for _, w := range []<-chan waitResult{w1, w2} {
				res := recvWait(t, w)
				isErrno(t, res.err, unix.EIO)
				require.Equal(t, uint32(hlsys.WaitCSStatusAborted), res.out.Status)
			}
			_, err = hlsys.WaitForCS(r.b, s1, 0)
			require.ErrorIs(t, err, os.ErrClosed)
			_, err = r.b.Mmap(int64(hlsys.MmapTypeCB<<12|1<<12), 4096)
			require.ErrorIs(t, err, os.ErrClosed)

			b2, err := r.d.open()
			require.NoError(t, err)
			defer b2.Close()
			u, err := hlsys.GetDramUsage(b2)
			require.NoError(t, err)
			require.Zero(t, u.CtxDramMem, "the closed context's memory was released")
		})
	}
}

func TestDeviceCloseWithWorkInFlight(t *testing.T) {
	r := newRig(t, Config{})
	r.d.DelayNextCS(1, time.Hour)
	seq, err := r.submit(0, 0, r.chunk(0, nop()))
	require.NoError(t, err)
	w := waitAsync(r.b, seq, uint64(safety.Microseconds()))
	blockedWaiters(t, r.b, 1)
	require.NoError(t, r.d.Close())
	res := recvWait(t, w)
	isErrno(t, res.err, unix.EIO)
	_, err = hlsys.WaitForCS(r.b, seq, 0)
	require.True(t, errors.Is(err, unix.ENODEV))
	require.NoError(t, r.b.Close())
}

// TestFaultInjectionConcurrent calls the injectors while work runs (for
// the race detector; outcomes vary, nothing may hang or leak).
func TestFaultInjectionConcurrent(t *testing.T) {
	r := newRig(t, Config{CSTimeout: 20 * time.Millisecond, MaxPendingCS: 16})
	chunk := r.chunk(0, nop())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 4 {
			case 0:
				r.d.DelayNextCS(1, time.Millisecond)
			case 1:
				r.d.AbortNextCS(1)
			case 2:
				r.d.HangNextCS(1)
			case 3:
				r.d.Reset()
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	for i := 0; i < 200; i++ {
		out, err := hlsys.SubmitCS(r.b, nil, []hlsys.CSChunk{chunk}, 0, 0)
		if err != nil {
			// EPERM: a concurrent Reset began after validation (C24).
			require.True(t, errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EPERM), "%v", err)
			time.Sleep(100 * time.Microsecond)
			continue
		}
		res, err := hlsys.WaitForCS(r.b, out.Seq, uint64(safety.Microseconds()))
		if err != nil {
			// EBUSY: the wait came while a Reset ran (W1).
			require.True(t, errors.Is(err, unix.EIO) || errors.Is(err, unix.ETIMEDOUT) || errors.Is(err, unix.EBUSY), "%v", err)
			require.NotEqual(t, uint32(hlsys.WaitCSStatusCompleted), res.Status)
		}
	}
	close(stop)
	<-done
	st := r.d.Stats()
	require.Equal(t, st.CSSubmitted, st.CSCompleted+st.CSAborted+st.CSTimedOut)
}

// TestTDRWatchesOldest checks the driver's TDR rule: only the oldest CS in
// flight has its timeout running (hl_hw_queue_schedule_cs arms it for the
// first on the mirror list; cs_handle_tdr for the next as one ends).
func TestTDRWatchesOldest(t *testing.T) {
	const ahead = 200 * time.Millisecond
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m, CSTimeout: time.Hour})
			flags := uint32(hlsys.CSFlagsCustomTimeout | hlsys.CSFlagsSkipResetOnTimeout)

			// Behind a hung CS, a CS whose timeout is 0 is not watched:
			// it completes.
			r.d.HangNextCS(1)
			hung, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			seq, err := r.submit(flags, 0, r.chunk(4, nop()))
			require.NoError(t, err)
			out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			r.d.Reset() // ends the hung CS
			_, err = hlsys.WaitForCS(r.b, hung, uint64(safety.Microseconds()))
			isErrno(t, err, unix.EIO)

			// Behind a CS that ends after `ahead`, the same CS, held for
			// an hour, has its timeout start then, and times out then.
			r.d.DelayNextCS(1, ahead)
			_, err = r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			r.d.DelayNextCS(1, time.Hour)
			start := time.Now()
			seq, err = r.submit(flags, 0, r.chunk(4, nop()))
			require.NoError(t, err)
			out, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
			isErrno(t, err, unix.ETIMEDOUT)
			require.Equal(t, uint32(hlsys.WaitCSStatusTimedOut), out.Status)
			require.GreaterOrEqual(t, time.Since(start), ahead/2, "timed out before the CS ahead of it ended")
		})
	}
}

// TestTDRTimerFollowsArmedCS: the context's one TDR timer (tdr.go) fires
// by the armed CS's deadline and no sooner. A CS armed as the one ahead
// of it ends is watched for its own whole timeout, though the timer was
// set for the earlier CS's deadline (it re-arms when it fires early); a
// CS whose deadline comes before the timer's moves the timer.
func TestTDRTimerFollowsArmedCS(t *testing.T) {
	// The CS ahead ends well within its own TDR (a late timer on a loaded
	// machine must not make it time out and reset the device).
	const tdr = time.Second
	const ahead = 300 * time.Millisecond
	cases := []struct {
		name       string
		aheadFlags uint32
		aheadSec   uint32 // custom timeout of the CS ahead
		min, max   time.Duration
	}{
		// The timer, set for the CS ahead (tdr), fires before the hung
		// CS's deadline (ahead+tdr) and must wait on.
		{"timer fires early", 0, 0, ahead + tdr - 50*time.Millisecond, 10 * time.Second},
		// The CS ahead has an hour: the hung CS's deadline moves the
		// timer earlier.
		{"timer moves earlier", hlsys.CSFlagsCustomTimeout, 3600, ahead + tdr - 50*time.Millisecond, 10 * time.Second},
	}
	for _, m := range models {
		for _, tc := range cases {
			t.Run(m.String()+"/"+tc.name, func(t *testing.T) {
				r := newRig(t, Config{Model: m, CSTimeout: tdr})
				r.d.DelayNextCS(1, ahead)
				start := time.Now()
				_, err := r.submit(tc.aheadFlags, tc.aheadSec, r.chunk(0, nop()))
				require.NoError(t, err)
				r.d.HangNextCS(1)
				seq, err := r.submit(hlsys.CSFlagsSkipResetOnTimeout, 0, r.chunk(4, nop()))
				require.NoError(t, err)
				out, err := hlsys.WaitForCS(r.b, seq, uint64(tc.max.Microseconds()))
				isErrno(t, err, unix.ETIMEDOUT)
				require.Equal(t, uint32(hlsys.WaitCSStatusTimedOut), out.Status)
				require.GreaterOrEqual(t, time.Since(start), tc.min, "timed out before its own deadline")
			})
		}
	}
}

// TestRefusedCSNotCounted: a CS refused after it took a sequence number
// (C24: the device went non-operational after validation) holds a slot
// from the moment csIoctl releases csMu until reject ends it; a reset in
// between ends it ABORTED. It was never counted as submitted, so its end
// must not be counted either: CSSubmitted = CSCompleted + CSAborted +
// CSTimedOut holds (TestFaultInjectionConcurrent found the race once in
// about a hundred runs; this is its interleaving, made directly).
func TestRefusedCSNotCounted(t *testing.T) {
	r := newRig(t, Config{})
	c := r.b.(*hctx)
	s := &cs{}
	c.csMu.Lock()
	s.seq = c.nextSeq
	c.nextSeq++
	c.slots[s.seq&uint64(len(c.slots)-1)] = s
	c.csMu.Unlock()
	c.abortAll(nil) // the reset's part: every CS in a slot and not ended
	c.reject(s)     // csIoctl's part, too late: the CS has ended
	require.True(t, s.isDone())
	st := r.d.Stats()
	require.Zero(t, st.CSSubmitted)
	require.Zero(t, st.CSAborted, "a CS never accepted is not counted when it ends")
	require.Equal(t, st.CSSubmitted, st.CSCompleted+st.CSAborted+st.CSTimedOut)
}
