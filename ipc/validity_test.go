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
