package engine

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCloseWaitsForStartingOps: an Endpoint operation that passed its
// checks just before Close began is one Close waits for until its data
// path has started it. Close waits for the engine's tasks once; a Put
// still starting then (over "tcp", a host Put above the inline size is
// sent by a task; over "unix", a worker copies into the peer's mapping
// and a task waits for it) started its task after that wait, so the task
// ran after Close returned, on memory Close had released. Each case
// parks its operation after it was admitted, before its data path's
// Start, and calls Close.
func TestCloseWaitsForStartingOps(t *testing.T) {
	ctx := context.Background()
	const n = 1 << 20 // above the inline sizes: tasks move the bytes
	for _, tc := range []struct {
		name      string
		network string
		list    bool
	}{
		{"tcp Put", "tcp", false},
		{"tcp PutList", "tcp", true},
		{"unix Put", "unix", false},
		{"unix PutList", "unix", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Devices: DevicesNone, Transport: TransportTCP}
			owner, e := newEngine(t, cfg), newEngine(t, cfg)
			addr := "127.0.0.1:0"
			if tc.network == "unix" {
				addr = filepath.Join(t.TempDir(), "owner.sock")
			}
			ln, err := owner.Listen(tc.network, addr)
			require.NoError(t, err)
			inbox, err := owner.Alloc(n, Host)
			require.NoError(t, err)
			key, err := inbox.Export()
			require.NoError(t, err)
			ep, err := e.Dial(ctx, tc.network, ln.Addr())
			require.NoError(t, err)
			msg, err := e.Alloc(n, Host)
			require.NoError(t, err)
			do := func() error {
				var f *Future
				if tc.list {
					f = ep.PutList(ctx, []Slice{msg.Slice(0, n/2), msg.Slice(n/2, n/2)}, []RemoteKey{key.Slice(0, n/2), key.Slice(n/2, n/2)})
				} else {
					f = ep.Put(ctx, msg.All(), key)
				}
				err := f.Wait(ctx)
				if errors.Is(err, ErrPeer) {
					return nil // the connection Close tore down
				}
				return err
			}
			parked, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			park := func() { once.Do(func() { close(parked); <-resume }) }
			e.starts.SetHook(&park)
			require.True(t, closeWhileParked(t, e, do, parked, resume), "Close returned while an operation was starting")
		})
	}
}
