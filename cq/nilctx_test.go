package cq

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTrackNilCtx: Track and TrackTicket refuse a nil context with
// ErrInvalid, whether or not there is room (as queue.Push does): the
// submission is not tracked, the caller still owns it. A nil context was
// accepted while there was room and panicked (ctx.Done() on a nil
// interface) once twice MaxOutstanding submissions were tracked: only
// under load.
func TestTrackNilCtx(t *testing.T) {
	for _, tc := range []struct {
		name string
		full bool // twice MaxOutstanding submissions tracked
	}{
		{"room", false},
		{"full", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWaiter()
			a := NewDeviceActor("fake", w, ActorConfig{MaxOutstanding: 1})
			defer a.Close(0)
			if tc.full {
				for seq := uint64(1); seq <= 2; seq++ {
					defer w.finish(seq, nil) // before Close
					require.NoError(t, a.Track(context.Background(), Submission{Seq: seq, OnDone: func(error) {}}))
				}
			}
			before := a.Outstanding()
			done := make(chan error, 1)
			s := Submission{Seq: 3, OnDone: func(err error) { done <- err }}
			var ctx context.Context // nil
			var err error
			require.NotPanics(t, func() { err = a.Track(ctx, s) })
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorIs(t, err, os.ErrInvalid)
			var tk *Ticket
			require.NotPanics(t, func() { tk, err = a.TrackTicket(ctx, s) })
			require.ErrorIs(t, err, ErrInvalid)
			require.Nil(t, tk)
			require.Equal(t, before, a.Outstanding())
			a.Close(0)
			select {
			case err := <-done:
				t.Fatalf("a refused submission's OnDone ran (%v)", err)
			default:
			}
		})
	}
}
