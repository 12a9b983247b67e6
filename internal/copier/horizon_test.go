package copier

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/cq"
)

// TestOldCSRetiredBeforeItsOutcomeIsLost: a command submission whose
// waiter stops polling it (a goroutine descheduled under load) while
// other copies keep the device busy is still retired in time. The driver
// keeps the outcome of a CS whose fence slot was reused only for the
// last HL_CS_OUTCOME_HISTORY_LEN (256) CSs that ended; WAIT_CS on one
// older than that reports its fence gone with no outcome
// (dma.ErrCSOutcomeLost), and a copy that succeeded would fail. Here the
// lagging CS is watched, so the actor leaves it to its waiter, and 400
// later copies end before anyone polls it.
func TestOldCSRetiredBeforeItsOutcomeIsLost(t *testing.T) {
	r := newRig(t, 1)
	g := r.c.Devs[0]
	ctx := context.Background()
	src, d := r.host(t, 4096), r.gaudi(t, 0, 4096)
	require.NoError(t, r.copy(ctx, d, src)) // CS 1, retired

	// Hold the actor in the OnDone of CS 1 (tracked again) while the
	// lagging copy is submitted, so that its ticket is watched before
	// the actor sees it.
	stalled, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, g.Actor.Track(ctx, cq.Submission{Seq: 1, OnDone: func(error) {
		close(stalled)
		<-release
	}}))
	<-stalled
	src.Refs.Add(1)
	d.Refs.Add(1)
	lag := NewFuture(1)
	if err := r.c.Copy(ctx, lag, Slice{M: d, N: 4096}, Slice{M: src, N: 4096}, time.Time{}); err != nil {
		close(release)
		require.NoError(t, err)
	}
	tk := lag.tickets[0].Load()
	if tk == nil {
		close(release)
		require.NotNil(t, tk, "the copy's CS is attached to its future")
	}
	tk.Watch() // its waiter "polls" it: the actor leaves it alone
	close(release)

	other := r.gaudi(t, 0, 4096)
	for i := 0; i < 400; i++ {
		require.NoError(t, r.copy(ctx, other, src))
	}
	tk.Unwatch() // the waiter gives up its spin; the actor takes it over
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, lag.Wait(wctx), "the lagging copy succeeded")
	require.Positive(t, g.Actor.Stats().HorizonPolls, "a later Track polled it")
}
