package ipc

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
)

func TestValidityRevokeSeenByReadOnlyView(t *testing.T) {
	v, err := NewValidity("t")
	require.NoError(t, err)
	view, err := MapValidity(v.FD())
	require.NoError(t, err)
	require.False(t, view.Revoked())
	// The peer cannot map the flag writable (F_SEAL_FUTURE_WRITE).
	_, err = unix.Mmap(v.FD().Int(), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.Error(t, err)
	v.Revoke()
	require.True(t, view.Revoked())
	require.NoError(t, v.Close())
	require.NoError(t, v.Close())
	require.True(t, view.Revoked())
	require.NoError(t, view.Close())
	require.NoError(t, view.Close())
	require.True(t, view.Revoked())
}

func TestMapValidityRefusesUnsealed(t *testing.T) {
	raw, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	f, err := fd.New(raw)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Ftruncate(raw, 4096))
	_, err = MapValidity(f)
	require.ErrorIs(t, err, ErrNotMemfd)
}

// A flag closed by its owner going (CloseGone) reads as revoked and as
// the owner gone; one revoked (freed) first stays freed, and Close is
// revoked only.
func TestValidityCloseGone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		revoke    bool // Revoke first (the allocation was freed)
		gone      bool // CloseGone, else Close
		ownerGone bool
	}{
		{"close", false, false, false},
		{"close gone", false, true, true},
		{"freed, then close gone", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewValidity("t")
			require.NoError(t, err)
			view, err := MapValidity(v.FD())
			require.NoError(t, err)
			defer func() { require.NoError(t, view.Close()) }()
			require.False(t, view.OwnerGone())
			if tc.revoke {
				v.Revoke()
			}
			if tc.gone {
				require.NoError(t, v.CloseGone())
			} else {
				require.NoError(t, v.Close())
			}
			require.True(t, view.Revoked())
			require.Equal(t, tc.ownerGone, view.OwnerGone())
		})
	}
}
