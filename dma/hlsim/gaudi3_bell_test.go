package hlsim

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestGaudi3FastDoorbellKeepsFaultsForLaterWork: a doorbell rung while no
// fault is armed takes the fast path (no mark). A fault armed after it,
// while the channel is still busy with earlier work, belongs to the next
// submission and not to the one already rung: whether the channel finds
// that work by itself ("polled") or a later doorbell, rung with the fault
// armed, announces more work behind it ("marked"). The first two copies
// complete and only the third hangs.
func TestGaudi3FastDoorbellKeepsFaultsForLaterWork(t *testing.T) {
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
			r.d.execHook = stopOnce(entered, release)
			r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
			select {
			case <-entered:
			case <-time.After(safety):
				t.Fatal("the channel did not start the first doorbell's work")
			}
			r.post(r.lin(dev+4096, srcVA, 4096, gaudi3.DirHostToDevice)) // fast path
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

// TestGaudi3FastDoorbellNotJoinedToLaterFault: a fast-path doorbell's
// work (rung with no fault armed) that the worker has not taken yet, then
// a fault armed, then more work stored to MSQ_PI whose doorbell has not
// rung yet (the submitter stores, then calls Doorbell): the worker that
// finds both takes the rung work as its own submission, without the
// fault, and the later work draws it. It used to take both as one polled
// submission and hang the work rung before the fault was armed.
func TestGaudi3FastDoorbellNotJoinedToLaterFault(t *testing.T) {
	r, srcVA, dev := newG3CopyRig(t)
	entered, release := make(chan struct{}), make(chan struct{})
	r.d.execHook = stopOnce(entered, release)
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
	select {
	case <-entered:
	case <-time.After(safety):
		t.Fatal("the channel did not start the first doorbell's work")
	}
	r.post(r.lin(dev+4096, srcVA, 4096, gaudi3.DirHostToDevice)) // fast path
	r.d.HangNextCS(1)
	r.bell = false // stored; the worker finds it before its doorbell rings
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
	close(release)
	require.Eventually(t, func() bool {
		r.channel().mu.Lock()
		defer r.channel().mu.Unlock()
		return r.channel().stalled
	}, safety, time.Millisecond, "the third submission did not hang")
	require.Equal(t, uint64(2), r.counter(), "the fast doorbell's work hung with the later work")
	st := r.d.Stats()
	require.Equal(t, uint64(3), st.CSSubmitted, "%+v", st)
	require.Equal(t, uint64(2), st.CSCompleted, "%+v", st)
}

// TestGaudi3FastDoorbellsRaceKeepLatestPI: two submitters ring the same
// channel on the fast path at once; the one that read the older MSQ_PI
// records it last. Both doorbells returned before a fault was armed, so
// neither's work may draw it: the channel must keep the newer MSQ_PI as
// announced. It kept the older one, and the newer work, found as polled,
// drew the hang armed after it.
func TestGaudi3FastDoorbellsRaceKeepLatestPI(t *testing.T) {
	r, srcVA, dev := newG3CopyRig(t)
	entered, release := make(chan struct{}), make(chan struct{})
	r.d.execHook = stopOnce(entered, release)
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
	select {
	case <-entered:
	case <-time.After(safety):
		t.Fatal("the channel did not start the first doorbell's work")
	}
	paused, resume := make(chan struct{}), make(chan struct{})
	var first atomic.Bool // only the first doorbell waits (stopOnce would hold the others)
	r.channel().fastHook = func() {
		if first.CompareAndSwap(false, true) {
			close(paused)
			<-resume
		}
	}
	r.bell = false
	r.post(r.lin(dev+4096, srcVA, 4096, gaudi3.DirHostToDevice))
	rang := make(chan struct{})
	go func() {
		defer close(rang)
		r.b.(*hctx).Doorbell(r.regs) // reads this MSQ_PI, then waits
	}()
	<-paused
	r.bell = true
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice)) // the other submitter
	close(resume)
	<-rang
	r.d.HangNextCS(1)
	close(release)
	out, err := r.wait(3)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status, "work rung before the fault was armed drew it")
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice)) // draws the hang
	require.Eventually(t, func() bool {
		r.channel().mu.Lock()
		defer r.channel().mu.Unlock()
		return r.channel().stalled
	}, safety, time.Millisecond, "the fourth submission did not hang")
	st := r.d.Stats()
	require.Equal(t, uint64(3), r.counter())
	require.Equal(t, uint64(3), st.CSSubmitted, "%+v", st)
	require.Equal(t, uint64(2), st.CSCompleted, "%+v", st)
}

// TestGaudi3FastDoorbellRacingStopLeavesNoStalePI: a fast-path doorbell
// that read MSQ_PI before another goroutine stopped the channel
// (CQ_RECONFIG) and records it after the stop dropped the channel's work
// must not record it: its work went with the stop. It recorded the old
// MSQ_PI, which the channel, programmed again from 0, took for an
// announcement of its new work: the doorbell rung there with a hang armed
// marked that work fault-free, and nothing hung.
func TestGaudi3FastDoorbellRacingStopLeavesNoStalePI(t *testing.T) {
	r, srcVA, dev := newG3CopyRig(t)
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
	_, err := r.wait(1)
	require.NoError(t, err)
	paused, resume := make(chan struct{}), make(chan struct{})
	var first atomic.Bool // only the first doorbell waits
	r.channel().fastHook = func() {
		if first.CompareAndSwap(false, true) {
			close(paused)
			<-resume
		}
	}
	r.bell = false
	r.post(r.lin(dev+4096, srcVA, 4096, gaudi3.DirHostToDevice))
	rang := make(chan struct{})
	go func() {
		defer close(rang)
		r.b.(*hctx).Doorbell(r.regs) // reads this MSQ_PI, then waits
	}()
	<-paused
	out, err := r.wait(2) // found by polling
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
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
	r.d.HangNextCS(1)
	r.post(cat(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice), r.lin(dev+4096, srcVA, 4096, gaudi3.DirHostToDevice)))
	require.Eventually(t, func() bool {
		r.channel().mu.Lock()
		defer r.channel().mu.Unlock()
		return r.channel().stalled
	}, safety, time.Millisecond, "the doorbell rung with the hang armed did not hang")
	st := r.d.Stats()
	require.Equal(t, uint64(2), r.counter(), "part of the hung doorbell's work ran")
	require.Equal(t, uint64(3), st.CSSubmitted, "%+v", st)
}

// TestGaudi3FastDoorbellDoesNotAnnounceLaterWork: a fast-path doorbell
// still under way when a fault is armed (it looked before) reads MSQ_PI
// after another submitter stored work there: that work's doorbell, rung
// after the fault was armed, must draw it. The fast doorbell recorded the
// later work's MSQ_PI as its own, fault-free, and the later doorbell
// found its work announced already: nothing hung.
func TestGaudi3FastDoorbellDoesNotAnnounceLaterWork(t *testing.T) {
	r, srcVA, dev := newG3CopyRig(t)
	entered, release := make(chan struct{}), make(chan struct{})
	r.d.execHook = stopOnce(entered, release)
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
	select {
	case <-entered:
	case <-time.After(safety):
		t.Fatal("the channel did not start the first doorbell's work")
	}
	paused, resume := make(chan struct{}), make(chan struct{})
	var first atomic.Bool // only the first doorbell waits
	r.channel().fastHook = func() {
		if first.CompareAndSwap(false, true) {
			close(paused)
			<-resume
		}
	}
	r.bell = false
	r.post(r.lin(dev+4096, srcVA, 4096, gaudi3.DirHostToDevice))
	rang := make(chan struct{})
	go func() {
		defer close(rang)
		r.b.(*hctx).Doorbell(r.regs) // reads this MSQ_PI, then waits
	}()
	<-paused
	r.b.(*hctx).Doorbell(r.regs) // a second ring of it, recorded first
	r.d.HangNextCS(1)
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice)) // stored; rung below
	close(resume)
	<-rang
	r.b.(*hctx).Doorbell(r.regs)
	close(release)
	require.Eventually(t, func() bool {
		r.channel().mu.Lock()
		defer r.channel().mu.Unlock()
		return r.channel().stalled
	}, safety, time.Millisecond, "the doorbell rung after the fault was armed did not hang")
	require.Equal(t, uint64(2), r.counter())
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
		r.b.(*hctx).Doorbell(r.regs) // looks at the queue, then waits
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
