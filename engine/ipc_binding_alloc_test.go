package engine

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A "unix" Binding's Put, Get, PutN and GetN (the loop of gxfer perf) are
// copies on the caller's goroutine with no allocation.
func TestIPCBindingNoAlloc(t *testing.T) {
	ctx := context.Background()
	owner, peer := newEngine(t, Config{Devices: DevicesNone}), newEngine(t, Config{Devices: DevicesNone})
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	ep, err := peer.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	inbox, err := owner.Alloc(4096, Host)
	require.NoError(t, err)
	k, err := inbox.Export()
	require.NoError(t, err)
	msg, err := peer.Alloc(4096, Host)
	require.NoError(t, err)
	bd, err := ep.Bind(ctx, msg.Slice(0, 64), k.Slice(128, 64))
	require.NoError(t, err)
	defer bd.Close()
	for name, op := range map[string]func() error{
		"Put":  bd.Put,
		"Get":  bd.Get,
		"PutN": func() error { return bd.PutN(16) },
		"GetN": func() error { return bd.GetN(16) },
	} {
		var opErr error
		allocs := testing.AllocsPerRun(200, func() {
			if err := op(); err != nil {
				opErr = err
			}
		})
		require.NoError(t, opErr, name)
		require.Zero(t, allocs, "%s allocates", name)
	}
}
