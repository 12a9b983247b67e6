package engine

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShmForgedKeyLength: over a unix endpoint the requester maps the
// owner's memory itself, and a key's MAC cannot be checked on its side
// (the owner made it). A key of an allocation already imported that
// claims a larger Length (or another MAC) is refused, whether it comes
// alone, to Bind, or as a later piece of a list sharing the first
// piece's import. Such keys used to reach past the 4 KiB mapping: a
// panic in Bind and in lists, a memmove 512 GiB past it when a peer sent
// one in a request.
func TestShmForgedKeyLength(t *testing.T) {
	ctx := context.Background()
	owner := newEngine(t, Config{Devices: DevicesNone})
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	dst, _ := owner.Alloc(4096, Host)
	k, err := dst.Export()
	require.NoError(t, err)
	user := newEngine(t, Config{Devices: DevicesNone})
	ep, err := user.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	defer ep.Close()
	src, _ := user.Alloc(4096, Host)
	require.NoError(t, ep.PutSync(ctx, src.Slice(0, 16), k.Slice(0, 16)), "the honest key imports the allocation")

	long := k
	long.k.Length, long.k.GrantLen = 1<<40, 1<<40
	long.k.Offset, long.k.Len = 1<<39, 16
	badMAC := k.View(16, 16)
	badMAC.k.MAC[0] ^= 1
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"put", func() error { return ep.PutSync(ctx, src.Slice(0, 16), long) }},
		{"bind", func() error { _, err := ep.Bind(ctx, src.Slice(0, 16), long); return err }},
		{"list, longer", func() error {
			return ep.PutList(ctx, []Slice{src.Slice(0, 16), src.Slice(16, 16)}, []RemoteKey{k.Slice(0, 16), long}).Wait(ctx)
		}},
		{"list, another MAC", func() error {
			return ep.PutList(ctx, []Slice{src.Slice(0, 16), src.Slice(16, 16)}, []RemoteKey{k.View(0, 16), badMAC}).Wait(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.op(), ErrInvalid)
		})
	}
	require.NoError(t, ep.PutSync(ctx, src.Slice(0, 16), k.Slice(0, 16)), "the honest key still works")
}
