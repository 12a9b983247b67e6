package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// blockFirstProcess makes the first worker batch of e (device or host)
// wait until release is closed; entered is closed when it does.
func blockFirstProcess(e *Engine) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	first := true
	hook := func() {
		if first {
			first = false
			close(entered)
			<-release
		}
	}
	e.cp.HookProcess.Store(&hook)
	return entered, release
}

// TestCancelDropsQueued: a copy still queued when its ctx is cancelled is
// dropped with ErrCanceled, its destination never written: a host copy
// queued for a host worker (larger than InlineHostMax), and a batch's
// device copies. Before, both ran to completion (the host path did not
// look at ctx, and a batch's device job carried none).
func TestCancelDropsQueued(t *testing.T) {
	cases := []struct {
		name string
		dst  Location
		// submit queues a copy of 1 MiB into dst behind the blocked
		// worker, under ctx.
		submit func(e *Engine, ctx context.Context, dst, src Slice) *Future
	}{
		{"host copy", Host, func(e *Engine, ctx context.Context, dst, src Slice) *Future {
			return e.Copy(ctx, dst, src)
		}},
		{"batch", Gaudi(0), func(e *Engine, ctx context.Context, dst, src Slice) *Future {
			b := e.NewBatch()
			b.Copy(dst, src)
			return b.Submit(ctx)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			const n = 1 << 20
			src, _ := e.Alloc(2*n, Host)
			dst, _ := e.Alloc(2*n, c.dst)
			out, _ := e.Alloc(n, Host)
			fill(src.Bytes(), 7)
			entered, release := blockFirstProcess(e)
			bg := context.Background()
			f0 := e.Copy(bg, dst.Slice(0, n), src.Slice(0, n))
			<-entered
			ctx, cancel := context.WithCancel(bg)
			f1 := c.submit(e, ctx, dst.Slice(n, n), src.Slice(n, n))
			cancel()
			close(release)
			require.NoError(t, f0.Wait(bg))
			<-f1.Done()
			require.ErrorIs(t, f1.Err(), ErrCanceled)
			require.ErrorIs(t, f1.Err(), context.Canceled)
			require.NoError(t, e.CopySync(bg, out.All(), dst.Slice(n, n)))
			require.Equal(t, make([]byte, n), out.Bytes(), "a dropped copy wrote its destination")
			require.Zero(t, e.Stats().InFlight)
		})
	}
}

// TestCopyCtxBoundsStalledSubmit: a Copy whose CS the device does not take
// (the completion slot of its sequence number is held by a hung CS) is
// dropped when its ctx ends, as a copy still queued is: nothing reached
// the device. Before the fix the CS ioctl's retries ignored ctx: a Copy
// run on the caller's goroutine (an idle device) blocked its caller for
// the whole retry budget (10 s), and then failed as a device error.
func TestCopyCtxBoundsStalledSubmit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		worker bool // a worker submits (else the caller, the device being idle)
	}{{"inline", false}, {"worker", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{MaxOpsPerCS: 1, CloseGrace: time.Millisecond})
			h, err := e.Alloc(1<<20, Host)
			require.NoError(t, err)
			d, err := e.Alloc(1<<20, Gaudi(0))
			require.NoError(t, err)
			ctx := context.Background()
			g := e.cp.Devs[0]
			hung := holdEverySlot(t, e, d, h)
			if tc.worker {
				noop := func() {}
				e.cp.HookProcess.Store(&noop)
			}
			cctx, cancel := context.WithCancel(ctx)
			go func() {
				for g.Dev.Stats().SubmitRetries == 0 {
					time.Sleep(100 * time.Microsecond)
				}
				cancel()
			}()
			f := e.Copy(cctx, d.Slice(512<<10, 4096), h.Slice(512<<10, 4096))
			err = f.Wait(ctx)
			require.ErrorIs(t, err, ErrCanceled)
			require.ErrorIs(t, err, context.Canceled)
			require.EqualValues(t, maxPendingCS, g.Sim.Stats().CSSubmitted, "the dropped copy reached the device")
			require.False(t, hung.IsDone())
		})
	}
}

// TestCopyCancelWhileQueuedBehindStalledSubmit: a copy still in its device
// queue when its ctx ends is dropped then, not when a worker gets to it:
// behind a worker waiting for a completion slot (the CS it submits has no
// ctx that can end) the copy resolved with ErrCanceled only once the
// device freed a slot.
func TestCopyCancelWhileQueuedBehindStalledSubmit(t *testing.T) {
	e := newEngine(t, Config{MaxOpsPerCS: 1})
	h, err := e.Alloc(1<<20, Host)
	require.NoError(t, err)
	d, err := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	ctx := context.Background()
	g := e.cp.Devs[0]
	fill := delayEverySlot(t, e, d, h)
	stalled := e.Copy(ctx, d.Slice(512<<10, 4096), h.Slice(512<<10, 4096))
	for g.Dev.Stats().SubmitRetries == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	cctx, cancel := context.WithCancel(ctx)
	f := e.Copy(cctx, d.Slice(600<<10, 4096), h.Slice(600<<10, 4096))
	cancel()
	err = f.Wait(ctx)
	waitedForDevice := fill[0].IsDone()
	require.NoError(t, stalled.Wait(ctx))
	for _, f := range fill {
		require.NoError(t, f.Wait(ctx))
	}
	require.ErrorIs(t, err, ErrCanceled)
	require.False(t, waitedForDevice, "the queued copy was dropped only once the device freed a slot")
	require.EqualValues(t, maxPendingCS+1, g.Sim.Stats().CSSubmitted, "the canceled copy reached the device")
}
