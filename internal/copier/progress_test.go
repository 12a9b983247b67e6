package copier

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/cq"
)

// TestSpinWaitPollsOnProgress: a spinning Wait polls its CS (WAIT_CS)
// only when the device's progress stamp moved, or every pollEvery+1
// looks, where the device has a stamp (Gaudi3's completion counters in
// memory); on Gaudi2, which has none, it polls at every look. Each look
// reads the stamp once. The copy
// is held back in the emulator for a while, so that Wait looks many
// times; the looks are counted by wrapping the device's real stamp.
func TestSpinWaitPollsOnProgress(t *testing.T) {
	tests := []struct {
		model   string
		stamped bool
	}{
		{"gaudi2", false},
		{"gaudi3", true},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			r := newRigModel(t, 1, tc.model)
			g := r.c.Devs[0]
			src, d := r.host(t, 4096), r.gaudi(t, 0, 4096)
			require.NoError(t, r.copy(context.Background(), d, src)) // sets direct mode up

			var looks, moved atomic.Int64
			var last atomic.Uint64
			real := g.progress
			g.progress = func() (uint64, bool) {
				v, ok := real()
				looks.Add(1)
				if ok && last.Swap(v) != v {
					moved.Add(1)
				}
				return v, ok
			}
			_, ok := real()
			require.Equal(t, tc.stamped, ok, "the device has a progress stamp")
			polls0 := g.Actor.Stats().WaiterPolls

			g.Sim.DelayNextCS(1, 20*time.Millisecond)
			src.Refs.Add(1)
			d.Refs.Add(1)
			f := &Future{}
			f.Init(1)
			require.NoError(t, r.c.Copy(context.Background(), f, Slice{M: d, N: 4096}, Slice{M: src, N: 4096}, time.Time{}))
			f.SetSpin(time.Minute) // outlasts the delay; ctx bounds a failing test
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(t, f.Wait(ctx))

			polls := int64(g.Actor.Stats().WaiterPolls - polls0)
			n := looks.Load()
			require.Greater(t, n, int64(2*(pollEvery+1)), "Wait looked many times while the copy was held back")
			if tc.stamped {
				// A poll per pollEvery+1 looks, one per stamp change,
				// and the first look's.
				require.LessOrEqual(t, polls, n/(pollEvery+1)+moved.Load()+2, "polls: %d looks, %d stamp changes", n, moved.Load())
			} else {
				// At every look, but for those that found the ticket
				// held by the actor (Ticket.Poll makes no WAIT_CS then).
				require.GreaterOrEqual(t, polls, n/2, "polls at every look without a stamp: %d looks", n)
			}
		})
	}
}

// TestProgressedTable: which stamps make a spinning Wait poll.
func TestProgressedTable(t *testing.T) {
	stamp := func(v uint64, ok bool) func() (uint64, bool) { return func() (uint64, bool) { return v, ok } }
	ticket := func(p func() (uint64, bool)) *cq.Ticket { return &cq.Ticket{Submission: cq.Submission{Progress: p}} }
	tests := []struct {
		name   string
		before *cq.Ticket // in slot 0 when the stamps are read
		after  *cq.Ticket // in slot 0 when they are compared
		want   bool
	}{
		{"no ticket", nil, nil, false},
		{"no stamp", ticket(nil), ticket(nil), true},
		{"stamp unreadable", ticket(stamp(3, false)), ticket(stamp(3, false)), true},
		{"stamp unchanged", ticket(stamp(3, true)), nil, false},
		{"replaced by a ticket with no stamp", ticket(stamp(3, true)), ticket(nil), true},
		{"stamp moved", ticket(stamp(3, true)), ticket(stamp(4, true)), true},
		{"stamp became unreadable", ticket(stamp(3, true)), ticket(stamp(3, false)), true},
		{"ticket attached after the read", nil, ticket(stamp(3, true)), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &Future{}
			f.tickets[0].Store(tc.before)
			var s stamps
			s.read(f)
			if tc.after != nil {
				f.tickets[0].Store(tc.after)
			}
			require.Equal(t, tc.want, f.progressed(&s))
		})
	}
}
