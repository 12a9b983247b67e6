package engine

// Remote-key verification.

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/wire"
)

// TestVerifyKeyCache: the last verified key is remembered, but only a key
// with exactly the same signed bytes skips the MAC; an edited copy of it
// (same MAC, other fields) is still refused.
func TestVerifyKeyCache(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	b, _ := e.Alloc(4096, Host)
	k, err := b.Export()
	require.NoError(t, err)
	good := k.k
	require.NoError(t, e.verifyKey(&good))
	view := good
	view.Offset, view.Len = 100, 8 // the view is not signed
	require.NoError(t, e.verifyKey(&view))
	for _, edit := range []func(*wire.RemoteKey){
		func(k *wire.RemoteKey) { k.AllocID++ },
		func(k *wire.RemoteKey) { k.Length *= 2 },
		func(k *wire.RemoteKey) { k.Flags |= wire.KeyWrite << 4 },
		func(k *wire.RemoteKey) { k.MAC[0] ^= 1 },
	} {
		forged := good
		edit(&forged)
		require.Error(t, e.verifyKey(&forged))
		require.NoError(t, e.verifyKey(&good))
	}
}
