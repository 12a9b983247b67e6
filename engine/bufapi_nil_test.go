package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBufAPINilBufferAll: All of a nil buffer is an invalid Slice, as
// Slice of a nil buffer is, not a panic.
func TestBufAPINilBufferAll(t *testing.T) {
	e := newEngine(t, Config{})
	d, err := e.Alloc(10, Host)
	require.NoError(t, err)
	var nb *Buffer
	var s Slice
	require.NotPanics(t, func() { s = nb.All() })
	require.ErrorIs(t, s.Err(), ErrInvalid)
	require.ErrorIs(t, e.CopySync(context.Background(), d.All(), s), ErrInvalid)
}
