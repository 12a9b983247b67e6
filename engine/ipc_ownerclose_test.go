package engine

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIPCBindingOwnerClosesIsPeerError: over "unix", a Binding's Put
// whose peer's engine closes while it copies (after the binding's check,
// before its copy) fails with ErrPeer, as over the pipe
// (TestPipeBindingOwnerCloses). It failed with ErrInvalid ("the peer's
// buffer was freed by its owner"), a bad key to the caller, although the
// key was good and the peer had gone: the owner's Close revokes every
// validity flag, and the binding's check after the copy read only that.
func TestIPCBindingOwnerClosesIsPeerError(t *testing.T) {
	ctx := context.Background()
	owner, peer, _, ep, _ := unixPair(t, Config{Devices: DevicesNone})
	const size = 64 << 10
	_, rk := exported(t, owner, size, Host)
	local, err := peer.Alloc(size, Host)
	require.NoError(t, err)
	bd, err := ep.Bind(ctx, local.All(), rk)
	require.NoError(t, err)
	defer bd.Close()
	require.NoError(t, bd.Put())
	var once sync.Once
	closeOwner := func() { once.Do(func() { _ = owner.Close() }) } // inside peer's gate, before the copy
	peer.gate.SetHook(&closeOwner)
	err = bd.Put()
	peer.gate.SetHook(nil)
	t.Logf("Put: %v", err)
	require.ErrorIs(t, err, ErrPeer)
	require.NotErrorIs(t, err, ErrInvalid)
}
