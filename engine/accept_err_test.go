package engine

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAcceptErrorsAreTyped: Accept refuses a nil context with ErrInvalid
// (it panicked) and ends with ErrCanceled or ErrTimeout wrapping the
// context's error when its ctx ends (it returned the bare context error),
// as Dial, Recv and the operations do; a closed listener's Accept fails
// with ErrClosed.
func TestAcceptErrorsAreTyped(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "a.sock"))
	require.NoError(t, err)
	defer l.Close()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		kinds []error
	}{
		{"nil context", nil, []error{ErrInvalid}},
		{"canceled", canceled, []error{ErrCanceled, context.Canceled}},
		{"deadline", expired, []error{ErrTimeout, context.DeadlineExceeded}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			p := func() (p any) {
				defer func() { p = recover() }()
				_, err = l.Accept(tc.ctx)
				return nil
			}()
			require.Nil(t, p, "Accept panicked")
			for _, k := range tc.kinds {
				require.ErrorIs(t, err, k)
			}
		})
	}
	require.NoError(t, l.Close())
	_, err = l.Accept(context.Background())
	require.ErrorIs(t, err, ErrClosed)
}
