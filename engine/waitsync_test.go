package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSyncErrorsAreTyped: when the ctx of a Sync call or of Future.Wait
// ends first, the error is ErrTimeout (or ErrCanceled) wrapping ctx's
// error, not ctx's bare error (errors.Is(err, ErrTimeout) failed before).
func TestSyncErrorsAreTyped(t *testing.T) {
	e := newEngine(t, Config{})
	h, _ := e.Alloc(1<<20, Host)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	m, err := e.Emulator(0)
	require.NoError(t, err)
	bg := context.Background()

	m.DelayNextCS(1, 300*time.Millisecond)
	f := e.Copy(bg, d.All(), h.All())
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	err = f.Wait(ctx)
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, f.Wait(bg), "ending the wait did not cancel the copy")

	m.DelayNextCS(1, 300*time.Millisecond)
	ctx2, cancel2 := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel2()
	err = e.CopySync(ctx2, d.All(), h.All())
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
