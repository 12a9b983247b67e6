package copier

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUntrackedCSKeepsItsOutcome: a copy whose submitter is descheduled
// between its CS ioctl and its Track (here: parked there) still
// succeeds while other submitters keep the device busy. The driver keeps
// the outcome of a CS whose fence slot was reused only for the last 256
// CSs that ended; nothing polls a CS before it is tracked, so 400 other
// copies ending meanwhile made WAIT_CS report it gone with no outcome
// (dma.ErrCSOutcomeLost) and the copy, which had succeeded, failed. The
// submission window holds the other submitters back instead.
func TestUntrackedCSKeepsItsOutcome(t *testing.T) {
	r := newRig(t, 1)
	g := r.c.Devs[0]
	ctx := context.Background()
	src, d := r.host(t, 4096), r.gaudi(t, 0, 4096)
	require.NoError(t, r.copy(ctx, d, src))

	parked, resume := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	park := func(uint64) {
		if first.CompareAndSwap(false, true) {
			close(parked)
			<-resume
		}
	}
	r.c.HookSubmitted.Store(&park)
	lag := make(chan error, 1)
	go func() { lag <- r.copy(ctx, d, src) }() // host to device: parks after its ioctl
	<-parked
	waited := make(chan struct{})
	var wonce sync.Once
	onWait := func() { wonce.Do(func() { close(waited) }) }
	g.win.hookWait.Store(&onWait)

	// Device-to-device copies: another direction's submitter.
	a, b := r.gaudi(t, 0, 4096), r.gaudi(t, 0, 4096)
	others := make(chan error, 1)
	go func() {
		for range 400 {
			if err := r.copy(ctx, b, a); err != nil {
				others <- err
				return
			}
		}
		others <- nil
	}()
	var othersErr error
	othersDone := false
	select {
	case <-waited: // the window holds them back until the lagging CS is tracked
	case othersErr = <-others:
		othersDone = true
	}
	close(resume)
	require.NoError(t, <-lag, "the lagging copy succeeded")
	if !othersDone {
		othersErr = <-others
	}
	require.NoError(t, othersErr)
	require.False(t, othersDone, "400 copies ended while a CS was not tracked")
}
