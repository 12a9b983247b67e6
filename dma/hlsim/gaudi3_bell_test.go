package hlsim

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestGaudi3DoorbellKeepsFaultsForLaterWork: a fault armed after a
// doorbell, while the channel is still busy with earlier work, belongs
// to the next submission and not to the one already rung (faults are
// drawn in doorbell order, RULES G6): whether the channel finds the next
// work by itself ("polled") or a doorbell rung with the fault armed
// announces it ("marked"). The first two copies complete and only the
// third hangs.
func TestGaudi3DoorbellKeepsFaultsForLaterWork(t *testing.T) {
	for _, tc := range []struct {
		name  string
		third bool // a third doorbell, rung with the fault armed
		want  uint64
	}{
		{"polled", false, 2},
		{"marked", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, srcVA, dev := newG3CopyRig(t)
			entered, release := make(chan struct{}), make(chan struct{})
			r.d.setExecHook(stopOnce(entered, release))
			r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
			select {
			case <-entered:
			case <-time.After(safety):
				t.Fatal("the channel did not start the first doorbell's work")
			}
			r.post(r.lin(dev+4096, srcVA, 4096, gaudi3.DirHostToDevice))
			r.d.HangNextCS(1)
			if tc.third {
				r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
			}
			close(release)
			out, err := r.wait(tc.want)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			if !tc.third {
				// The hang is still armed: the next submission draws it.
				r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
			}
			require.Eventually(t, func() bool {
				r.channel().mu.Lock()
				defer r.channel().mu.Unlock()
				return r.channel().stalled
			}, safety, time.Millisecond, "the third submission did not hang")
			require.Equal(t, tc.want, r.counter())
			st := r.d.Stats()
			require.Equal(t, uint64(3), st.CSSubmitted, "%+v", st)
			require.Equal(t, uint64(2), st.CSCompleted, "%+v", st)
		})
	}
}

// TestGaudi3ChannelErrorAbortedOnce: a submission that fails on the
// channel (an injected abort, a fault on its packet) is counted aborted
// when it fails; the reset that follows must not count it again when it
// drops the halted channel: every submission ends once, CSSubmitted =
// CSCompleted + CSAborted + CSTimedOut.
func TestGaudi3ChannelErrorAbortedOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		post func(r *g3rig, srcVA, dev uint64)
	}{
		{"injected abort", func(r *g3rig, srcVA, dev uint64) {
			r.d.AbortNextCS(1)
			r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
		}},
		{"channel error", func(r *g3rig, _, dev uint64) {
			r.post(r.lin(dev, 0x1234_0000_0000, 4096, gaudi3.DirHostToDevice)) // unmapped source
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, srcVA, dev := newG3CopyRig(t)
			tc.post(r, srcVA, dev)
			// No eventfd: the device resets at once, in the background.
			require.Eventually(t, func() bool { return r.d.Stats().Resets == 1 }, safety, time.Millisecond)
			st := r.d.Stats()
			require.Equal(t, uint64(1), st.CSSubmitted, "%+v", st)
			require.Equal(t, uint64(1), st.CSAborted, "%+v", st)
			require.Equal(t, st.CSSubmitted, st.CSCompleted+st.CSAborted+st.CSTimedOut, "%+v", st)
		})
	}
}

// TestGaudi3DoorbellNotJoinedToLaterFault: a doorbell's work (rung with
// no fault armed) that the worker has not taken yet, then a fault armed,
// then more work stored to MSQ_PI whose doorbell has not rung yet (the
// submitter stores, then calls Doorbell): the worker that finds both
// takes the rung work as its own submission (its mark), without the
// fault, and the later work draws it.
func TestGaudi3DoorbellNotJoinedToLaterFault(t *testing.T) {
	r, srcVA, dev := newG3CopyRig(t)
	entered, release := make(chan struct{}), make(chan struct{})
	r.d.setExecHook(stopOnce(entered, release))
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
	select {
	case <-entered:
	case <-time.After(safety):
		t.Fatal("the channel did not start the first doorbell's work")
	}
	r.post(r.lin(dev+4096, srcVA, 4096, gaudi3.DirHostToDevice))
	r.d.HangNextCS(1)
	r.bell = false // stored; the worker finds it before its doorbell rings
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
	close(release)
	require.Eventually(t, func() bool {
		r.channel().mu.Lock()
		defer r.channel().mu.Unlock()
		return r.channel().stalled
	}, safety, time.Millisecond, "the third submission did not hang")
	require.Equal(t, uint64(2), r.counter(), "the rung work hung with the later work")
	st := r.d.Stats()
	require.Equal(t, uint64(3), st.CSSubmitted, "%+v", st)
	require.Equal(t, uint64(2), st.CSCompleted, "%+v", st)
}

// TestGaudi3CloseEndsQueuedWork: a context closed while a PDMA channel
// still holds submissions (a hung doorbell, one announced behind it, a
// completion held back), on a device whose release does not reset it (not
// operational), ends them ABORTED, as the release ends a Gaudi2 context's
// CSs: every submission ends once, CSSubmitted = CSCompleted + CSAborted +
// CSTimedOut. They were never ended.
func TestGaudi3CloseEndsQueuedWork(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status uint32
		queue  func(r *g3rig, pkt []byte)
	}{
		{"hung and announced/malfunction", hlsys.DeviceStatusMalfunction, func(r *g3rig, pkt []byte) {
			r.d.HangNextCS(1)
			r.post(pkt)
			r.waitStalled()
			r.post(pkt)
		}},
		{"hung and announced/needs reset", hlsys.DeviceStatusNeedsReset, func(r *g3rig, pkt []byte) {
			r.d.HangNextCS(1)
			r.post(pkt)
			r.waitStalled()
			r.post(pkt)
		}},
		{"delayed completion", hlsys.DeviceStatusMalfunction, func(r *g3rig, pkt []byte) {
			r.d.DelayNextCS(1, time.Hour)
			r.post(pkt)
			require.Eventually(r.t, func() bool {
				r.channel().mu.Lock()
				defer r.channel().mu.Unlock()
				return len(r.channel().pend) == 1
			}, safety, time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, srcVA, dev := newG3CopyRig(t)
			tc.queue(r, r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
			r.d.ForceStatus(tc.status)
			require.NoError(t, r.b.Close())
			st := r.d.Stats()
			require.NotZero(t, st.CSSubmitted)
			require.Equal(t, st.CSSubmitted, st.CSCompleted+st.CSAborted+st.CSTimedOut, "%+v", st)
		})
	}
}

// waitStalled waits for the rig's channel to hang at a doorbell.
func (r *g3rig) waitStalled() {
	require.Eventually(r.t, func() bool {
		r.channel().mu.Lock()
		defer r.channel().mu.Unlock()
		return r.channel().stalled
	}, safety, time.Millisecond, "the channel did not hang")
}

// TestGaudi3MarkedDoorbellRacingStopLeavesNoStaleMark: a doorbell rung
// with a fault armed that looked at the queue before another goroutine
// stopped it (CQ_RECONFIG) and marks it after the stop dropped the queue
// must not mark the old queue's MSQ_PI: its work went with the stop. The
// mark it left, beyond the MSQ_PI of the channel programmed again from 0,
// was dropped by the worker, counted submitted and never ended.
func TestGaudi3MarkedDoorbellRacingStopLeavesNoStaleMark(t *testing.T) {
	r, srcVA, dev := newG3CopyRig(t)
	pkt := r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice)
	r.d.HangNextCS(1)
	r.post(pkt) // the channel sticks here
	r.waitStalled()
	r.d.DelayNextCS(1, 0) // the next doorbell takes the marked path
	paused, resume := make(chan struct{}), make(chan struct{})
	var first atomic.Bool // only the first doorbell waits
	r.channel().markHook = func() {
		if first.CompareAndSwap(false, true) {
			close(paused)
			<-resume
		}
	}
	r.bell = false
	r.post(pkt)
	rang := make(chan struct{})
	go func() {
		defer close(rang)
		r.b.(*hctx).Doorbell(r.regs) // reads gen, then waits
	}()
	<-paused
	// Another goroutine stops the queue; the doorbell goes on meanwhile.
	r.w(gaudi3.RegCQReconfig, 1)
	r.b.(*hctx).Doorbell(r.regs)
	close(resume)
	<-rang
	r.w(gaudi3.RegMSQCI, 0)
	r.pi = 0
	r.w(gaudi3.RegMSQPI, 0)
	r.w(gaudi3.RegCQReconfig, 0)
	r.bell = true
	r.post(pkt)
	out, err := r.wait(1)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
	// Counted completed just after the counter moved.
	require.Eventually(t, func() bool { return r.d.Stats().CSCompleted == 1 }, safety, time.Millisecond)
	st := r.d.Stats()
	require.Equal(t, st.CSSubmitted, st.CSCompleted+st.CSAborted+st.CSTimedOut, "%+v", st)
}

// TestGaudi3CompletionWriteFaultAborts: a completion whose counter write
// faults (ECMPLTN_Q_BASE unmapped) is a channel error like a fault on the
// packet's data (G8): the submission ends ABORTED, counted once, the
// channel halts and the device resets; it must not count as completed.
// Before the fix the write's fault was only logged and the submission
// counted COMPLETED, with no counter advance and no interrupt, so a
// waiter on the counter waited for a completion nothing reported. Both
// paths are covered: a completion signalled at once (step) and one held
// back by DelayNextCS (signalled by a later flush).
func TestGaudi3CompletionWriteFaultAborts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{
		{"at once", 0},
		{"held back", 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, srcVA, dev := newG3CopyRig(t)
			var unmapped uint64 = 0x1234_0000_0000
			r.w(gaudi3.RegECQBaseLo, uint32(unmapped))
			r.w(gaudi3.RegECQBaseHi, uint32(unmapped>>32))
			if tc.delay > 0 {
				r.d.DelayNextCS(1, tc.delay)
			}
			r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
			// No eventfd: the device resets at once, in the background.
			require.Eventually(t, func() bool {
				st := r.d.Stats()
				return st.Resets == 1 || st.CSCompleted > 0
			}, safety, time.Millisecond, "the submission neither completed nor reset the device")
			st := r.d.Stats()
			require.Zero(t, st.CSCompleted, "a submission whose completion write faulted completed: %+v", st)
			require.Equal(t, uint64(1), st.Resets, "%+v", st)
			require.Equal(t, uint64(1), st.CSSubmitted, "%+v", st)
			require.Equal(t, uint64(1), st.CSAborted, "%+v", st)
			require.Equal(t, uint64(1), st.EngineFaults, "%+v", st)
			require.Equal(t, st.CSSubmitted, st.CSCompleted+st.CSAborted+st.CSTimedOut, "%+v", st)
		})
	}
}
