package engine

// Remote-key verification.

import (
	"math"
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

// TestParseRemoteKeyHugeView: a peer's key whose view is longer than an
// int can hold (well-formed for the wire, which counts in uint64) is
// refused by ParseRemoteKey as malformed, so Len never goes negative.
func TestParseRemoteKeyHugeView(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length uint64 // allocation, grant and view length
		ok     bool
	}{
		{"max int", math.MaxInt, true},
		{"max int + 1", math.MaxInt + 1, false},
		{"max uint64", math.MaxUint64, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wk := wire.RemoteKey{MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead | wire.KeyWrite,
				AllocID: 1, Generation: 1, Length: tc.length, GrantLen: tc.length, Len: tc.length}
			b, err := wk.MarshalBinary()
			require.NoError(t, err, "well-formed for the wire")
			k, err := ParseRemoteKey(b)
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, uint64(tc.length), uint64(k.Len()))
				return
			}
			require.ErrorIs(t, err, ErrInvalid, "Len would be %d", k.Len())
			require.ErrorIs(t, err, wire.ErrMalformed)
		})
	}
}
