package dma

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// TestDetachedAttachmentMakesNoIoctl: after Detach, gxfer issues no ioctl
// through the runtime's fd (DramUsage used to): the runtime may have
// closed it, and the number may name another file.
func TestDetachedAttachmentMakesNoIoctl(t *testing.T) {
	_, rt := newRuntime(t, attachCase{hlsim.ModelGaudi2, "6.8", 0})
	at, err := Attach(rt.Target(), rt.Anchor(), AttachOptions{})
	require.NoError(t, err)
	require.NoError(t, at.Detach())
	before := rt.Stats().LentIoctls
	_, err = at.DramUsage()
	require.ErrorIs(t, err, ErrDetached)
	require.Equal(t, before, rt.Stats().LentIoctls, "ioctl through the borrowed fd after Detach")
}
