package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRemoteKeyBadSliceBytes: a key made by a Slice (or View) with a bad
// range encodes to nothing a peer could use. Its Bytes encoded the key it
// was sliced from, so a caller that handed a peer sub.Bytes() without
// checking sub.Err() gave away the whole buffer instead of the range.
func TestRemoteKeyBadSliceBytes(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	b, err := e.Alloc(64<<10, Host)
	require.NoError(t, err)
	root, err := b.Export()
	require.NoError(t, err)
	narrow := root.Slice(8192, 4096)
	require.NoError(t, narrow.Err())
	for _, tc := range []struct {
		name string
		k    RemoteKey
	}{
		{"root: negative offset", root.Slice(-1, 4096)},
		{"root: negative length", root.Slice(0, -1)},
		{"root: past the end", root.Slice(60<<10, 8192)},
		{"root: empty", root.Slice(0, 0)},
		{"root: offset at the end", root.Slice(64<<10, 1)},
		{"narrow: past its view", narrow.Slice(0, 8192)},
		{"narrow: empty", narrow.Slice(4096, 0)},
		{"root: bad view", root.View(64<<10-100, 4096)},
		{"narrow: bad view", narrow.View(-1, 10)},
		{"a bad key sliced again", root.Slice(-1, 1).Slice(0, 4096)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.k.Err(), ErrInvalid)
			enc := tc.k.Bytes()
			_, err := ParseRemoteKey(enc)
			require.Error(t, err, "a bad key's bytes parse as a key of %d bytes", tc.k.Len())
			require.Empty(t, enc)
		})
	}
	// A good key still round-trips.
	got, err := ParseRemoteKey(narrow.Bytes())
	require.NoError(t, err)
	require.Equal(t, narrow.k, got.k)
}
