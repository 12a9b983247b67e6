package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNilOpOption: Copy applies its options only after it has taken
// references on both buffers, so a nil OpOption (e.g. a conditionally
// built option list) panics with the references held: even if the caller
// recovers, Free never releases the buffers.
func TestNilOpOption(t *testing.T) {
	e := newEngine(t, Config{})
	h, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	d, err := e.Alloc(4096, Gaudi(0))
	require.NoError(t, err)
	var f *Future
	p := func() (p any) {
		defer func() { p = recover() }()
		f = e.Copy(context.Background(), d.All(), h.All(), nil)
		return nil
	}()
	require.Nil(t, p, "Copy panicked on a nil option")
	require.NoError(t, f.Wait(context.Background()))
	require.NoError(t, h.Free())
	e.mu.Lock()
	_, alive := e.buffers[h.id]
	e.mu.Unlock()
	require.False(t, alive, "freed buffer still alive")
}
