package engine

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/shm"
)

// TestCloseWaitsForStartingOps: an Endpoint operation that passed its
// checks just before Close began is one Close waits for until its data
// path has started it (a Bind: until it is bound; it imports the peer's
// memory as a buffer, which Close would never release once it had
// collected the live ones). Close waits for the engine's tasks once; a Put
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
		name    string
		network string
		op      string
	}{
		{"tcp Put", "tcp", "put"},
		{"tcp PutList", "tcp", "list"},
		{"unix Put", "unix", "put"},
		{"unix PutList", "unix", "list"},
		{"unix Bind", "unix", "bind"},
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
			parked, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			park := func() { once.Do(func() { close(parked); <-resume }) }
			if tc.op == "bind" {
				// (Set before the transport is used.) Parked once the peer answered the import, before the
				// mapping becomes a buffer of the engine.
				e.shm().SetHooks(shm.Hooks{Imported: park})
			} else {
				e.starts.SetHook(&park)
			}
			ep, err := e.Dial(ctx, tc.network, ln.Addr())
			require.NoError(t, err)
			msg, err := e.Alloc(n, Host)
			require.NoError(t, err)
			do := func() error {
				var err error
				switch tc.op {
				case "put":
					err = ep.Put(ctx, msg.All(), key).Wait(ctx)
				case "list":
					err = ep.PutList(ctx, []Slice{msg.Slice(0, n/2), msg.Slice(n/2, n/2)}, []RemoteKey{key.Slice(0, n/2), key.Slice(n/2, n/2)}).Wait(ctx)
				case "bind":
					var b *Binding
					if b, err = ep.Bind(ctx, msg.All(), key); err == nil {
						err = b.Close()
					}
				}
				if errors.Is(err, ErrPeer) {
					return nil // the connection Close tore down
				}
				return err
			}
			require.True(t, closeWhileParked(t, e, do, parked, resume), "Close returned while an operation was starting")
		})
	}
}
