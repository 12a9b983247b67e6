package hlsim

import (
	"errors"
	"os"
	"testing"
	"time"
	"unsafe"

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

// TestCustomTimeout: CUSTOM_TIMEOUT of 0 seconds arms a TDR that fires at
// once; with SKIP_RESET_ON_TIMEOUT it only posts CS_TIMEOUT (X2 done: R8).
func TestCustomTimeout(t *testing.T) {
	r := newRig(t, Config{CSTimeout: time.Hour})
	efd := registerEventFD(t, r)
	r.d.HangNextCS(1)
	seq, err := r.submit(hlsys.CSFlagsCustomTimeout|hlsys.CSFlagsSkipResetOnTimeout, 0, r.chunk(0, nop()))
	require.NoError(t, err)
	waitEvent(t, efd, safety)
	ev, err := hlsys.GetEvents(r.b)
	require.NoError(t, err)
	require.Equal(t, uint64(hlsys.NotifierCSTimeout), ev)
	out, err := hlsys.WaitForCS(r.b, seq, 0)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status)
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
// the race detector; outcomes vary, nothing may hang or leak). The client
// does what the driver asks of it: on a DEVICE_RESET event, or once
// killed (ENODEV), it releases the context and opens it again.
func TestFaultInjectionConcurrent(t *testing.T) {
	d, err := New(Config{CSTimeout: 20 * time.Millisecond, ReleaseWatchdog: 30 * time.Millisecond,
		MaxPendingCS: 16, Kill: func() {}})
	require.NoError(t, err)
	defer d.Close()
	cbMem := hostMem(t, 4096)
	copy(cbMem, nop())
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	require.NoError(t, err)
	defer unix.Close(efd)
	deadline := time.Now().Add(safety)
	// open gets a context set up (a concurrent reset may refuse any step:
	// then it starts over).
	open := func() (hlsys.Backend, hlsys.CSChunk) {
		for {
			require.True(t, time.Now().Before(deadline), "no usable context")
			b, err := d.open()
			if err != nil {
				require.True(t, errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EBUSY), "%v", err)
				time.Sleep(100 * time.Microsecond)
				continue
			}
			va, err := hlsys.MemMapHost(b, unsafe.Pointer(&cbMem[0]), 4096, 0, 0)
			if err == nil {
				err = hlsys.RegisterEventFD(b, efd)
			}
			if err == nil {
				return b, hlsys.CSChunk{CBHandle: va, CBSize: 8, Flags: hlsys.CSChunkFlagsUserAllocCB}
			}
			require.True(t, errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENODEV), "%v", err)
			require.NoError(t, b.Close())
		}
	}
	b, chunk := open()
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
				d.DelayNextCS(1, time.Millisecond)
			case 1:
				d.AbortNextCS(1)
			case 2:
				d.HangNextCS(1)
			case 3:
				if i%16 == 3 {
					d.Reset()
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	recycles := 0
	for i := 0; i < 200; i++ {
		out, err := hlsys.SubmitCS(b, nil, []hlsys.CSChunk{chunk}, 0, 0)
		if err == nil {
			var res hlsys.WaitCSOut
			res, err = hlsys.WaitForCS(b, out.Seq, uint64(safety.Microseconds()))
			if err != nil {
				// EIO: aborted or forced; ETIMEDOUT: rolled back after its
				// TDR; EBUSY: the watchdog runs or the device is in reset.
				require.True(t, errors.Is(err, unix.EIO) || errors.Is(err, unix.ETIMEDOUT) ||
					errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENODEV), "%v", err)
				require.NotEqual(t, uint32(hlsys.WaitCSStatusCompleted), res.Status)
			}
		} else {
			// EAGAIN: slots busy; EBUSY: in reset; EPERM: a reset began
			// after validation (C24); ENODEV: killed.
			require.True(t, errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EBUSY) ||
				errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENODEV), "%v", err)
		}
		ev, evErr := hlsys.GetEvents(b)
		if evErr != nil || ev&hlsys.NotifierDeviceReset != 0 || errors.Is(err, unix.ENODEV) {
			require.NoError(t, b.Close())
			b, chunk = open()
			recycles++
		}
	}
	close(stop)
	<-done
	require.NoError(t, b.Close())
	st := d.Stats()
	require.Equal(t, st.CSSubmitted, st.CSCompleted+st.CSAborted+st.CSTimedOut, "%+v", st)
	t.Logf("recycles %d, %+v", recycles, st)
}

// TestTDRWatchesOldest checks the driver's TDR rule: only the oldest CS in
// flight has its timeout running (hl_hw_queue_schedule_cs arms it for the
// first on the mirror list; cs_handle_tdr for the next as one ends). The
// TDR of a CS with SKIP_RESET_ON_TIMEOUT shows only as the CS_TIMEOUT
// event (R8), which signals the eventfd.
func TestTDRWatchesOldest(t *testing.T) {
	const ahead = 200 * time.Millisecond
	flags := uint32(hlsys.CSFlagsCustomTimeout | hlsys.CSFlagsSkipResetOnTimeout)
	for _, m := range models {
		t.Run(m.String()+"/behind_hung", func(t *testing.T) {
			// Behind a hung CS, a CS whose timeout is 0 is not watched:
			// it completes.
			r := newRig(t, Config{Model: m, CSTimeout: time.Hour})
			r.d.HangNextCS(1)
			_, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			seq, err := r.submit(flags, 0, r.chunk(4, nop()))
			require.NoError(t, err)
			out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			ev, err := hlsys.GetEvents(r.b)
			require.NoError(t, err)
			require.Zero(t, ev, "no TDR fired")
		})
		t.Run(m.String()+"/behind_delayed", func(t *testing.T) {
			// Behind a CS that ends after `ahead`, the same CS, held for
			// an hour, has its timeout start then, and times out then.
			r := newRig(t, Config{Model: m, CSTimeout: time.Hour})
			efd := registerEventFD(t, r)
			r.d.DelayNextCS(1, ahead)
			_, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			r.d.DelayNextCS(1, time.Hour)
			start := time.Now()
			seq, err := r.submit(flags, 0, r.chunk(4, nop()))
			require.NoError(t, err)
			waitEvent(t, efd, safety)
			require.GreaterOrEqual(t, time.Since(start), ahead/2, "timed out before the CS ahead of it ended")
			ev, err := hlsys.GetEvents(r.b)
			require.NoError(t, err)
			require.Equal(t, uint64(hlsys.NotifierCSTimeout), ev)
			out, err := hlsys.WaitForCS(r.b, seq, 0)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status, "SKIP_RESET: still in flight")
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
				efd := registerEventFD(t, r)
				r.d.DelayNextCS(1, ahead)
				start := time.Now()
				_, err := r.submit(tc.aheadFlags, tc.aheadSec, r.chunk(0, nop()))
				require.NoError(t, err)
				r.d.HangNextCS(1)
				_, err = r.submit(hlsys.CSFlagsSkipResetOnTimeout, 0, r.chunk(4, nop()))
				require.NoError(t, err)
				waitEvent(t, efd, tc.max)
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
