package queue

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPushNilCtx: Push with a nil context is refused with ErrInvalid
// (matching os.ErrInvalid) in every mode and whether or not the queue
// has room, and queues nothing. It used to succeed while there was room
// and panic (ctx.Done() on a nil interface) once a Wait-mode queue was
// full: the same call crashed the process only under load.
func TestPushNilCtx(t *testing.T) {
	tests := []struct {
		name string
		mode Mode
		full bool
	}{
		{"wait, room", Wait, false},
		{"wait, full", Wait, true},
		{"failfast, room", FailFast, false},
		{"failfast, full", FailFast, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := New[int](1, tc.mode)
			defer q.Close()
			if tc.full {
				require.NoError(t, q.Push(context.Background(), 1))
			}
			before := q.Len()
			var nilCtx context.Context // the input under test
			var err error
			require.NotPanics(t, func() { err = q.Push(nilCtx, 2) })
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorIs(t, err, os.ErrInvalid)
			require.Equal(t, before, q.Len(), "nothing queued")
		})
	}
}
