package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBufferZeroValue: a declared Buffer{} (not made by Alloc or
// Register) answers every method without a panic: ErrInvalid from Free,
// Deregister, Export and ExportDMABuf, zero values from the accessors,
// and a typed error from a copy of its slices. Free, Deregister and
// Export dereferenced its nil engine.
func TestBufferZeroValue(t *testing.T) {
	e := newEngine(t, Config{})
	h, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		call func(b *Buffer) error
	}{
		{"Free", (*Buffer).Free},
		{"Free twice", func(b *Buffer) error { _ = b.Free(); return b.Free() }},
		{"Deregister", (*Buffer).Deregister},
		{"Export", func(b *Buffer) error { _, err := b.Export(); return err }},
		{"ExportDMABuf", func(b *Buffer) error { _, err := b.ExportDMABuf(); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b Buffer
			var err error
			require.NotPanics(t, func() { err = tc.call(&b) })
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
	var b Buffer
	require.NotPanics(t, func() {
		require.Zero(t, b.Addr())
		require.Nil(t, b.Bytes())
		require.Zero(t, b.Size())
		require.Equal(t, Host, b.Location())
		err = e.CopySync(context.Background(), h.Slice(0, 1), b.Slice(0, 1))
	})
	require.Error(t, err)
}
