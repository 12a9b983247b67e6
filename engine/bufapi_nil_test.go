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

// TestBufAPINilBufferMethods: every method of a nil buffer answers
// without a panic: zero values, or ErrInvalid where there is an error.
// Free, Deregister, Export, ExportDMABuf, Addr and Bytes panicked.
func TestBufAPINilBufferMethods(t *testing.T) {
	var nb *Buffer
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Free", nb.Free},
		{"Deregister", nb.Deregister},
		{"Export", func() error { _, err := nb.Export(); return err }},
		{"ExportDMABuf", func() error { _, err := nb.ExportDMABuf(); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tc.call() })
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
	require.NotPanics(t, func() {
		require.Zero(t, nb.Addr())
		require.Nil(t, nb.Bytes())
		require.Zero(t, nb.Size())
		require.Equal(t, Host, nb.Location())
	})
}
