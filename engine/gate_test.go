package engine

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCloseWaitsForCallerCopies: Close never unmaps memory that a copy on
// a caller's goroutine (or a host worker) is touching. Each case parks
// its copy inside the gate, after the call was admitted and before it
// touches memory, then calls Close: Close must wait for the copy. Before
// the gate, Close unmapped the buffers at once and the resumed copy
// faulted (SIGSEGV, "unexpected fault address"), killing the test binary.
func TestCloseWaitsForCallerCopies(t *testing.T) {
	ctx := context.Background()
	hostPair := func(t *testing.T, e *Engine, n int) (dst, src *Buffer) {
		var err error
		src, err = e.Alloc(n, Host)
		require.NoError(t, err)
		dst, err = e.Alloc(n, Host)
		require.NoError(t, err)
		fill(src.Bytes(), 7)
		return dst, src
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (*Engine, func() error)
	}{
		{"inline Copy", func(t *testing.T) (*Engine, func() error) {
			e := newEngine(t, Config{Devices: DevicesNone})
			dst, src := hostPair(t, e, 64<<10)
			return e, func() error { return e.Copy(ctx, dst.All(), src.All()).Err() }
		}},
		{"Batch host op", func(t *testing.T) (*Engine, func() error) {
			e := newEngine(t, Config{Devices: DevicesNone})
			dst, src := hostPair(t, e, 1<<20)
			return e, func() error {
				b := e.NewBatch()
				b.Copy(dst.All(), src.All())
				return b.Submit(ctx).Wait(ctx)
			}
		}},
		{"host worker copy", func(t *testing.T) (*Engine, func() error) {
			e := newEngine(t, Config{Devices: DevicesNone, CloseGrace: time.Millisecond})
			dst, src := hostPair(t, e, 1<<20) // above InlineHostMax: a worker copies
			return e, func() error { return e.Copy(ctx, dst.All(), src.All()).Wait(ctx) }
		}},
		{"Binding Put", func(t *testing.T) (*Engine, func() error) {
			owner := newEngine(t, Config{Devices: DevicesNone})
			e := newEngine(t, Config{Devices: DevicesNone})
			ln, err := owner.Listen("unix", filepath.Join(t.TempDir(), "owner.sock"))
			require.NoError(t, err)
			inbox, err := owner.Alloc(64<<10, Host)
			require.NoError(t, err)
			key, err := inbox.Export()
			require.NoError(t, err)
			ep, err := e.Dial(ctx, "unix", ln.Addr())
			require.NoError(t, err)
			msg, err := e.Alloc(64<<10, Host)
			require.NoError(t, err)
			b, err := ep.Bind(ctx, msg.All(), key)
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			return e, b.Put
		}},
		{"PutList over unix", func(t *testing.T) (*Engine, func() error) {
			owner := newEngine(t, Config{Devices: DevicesNone})
			e := newEngine(t, Config{Devices: DevicesNone})
			ln, err := owner.Listen("unix", filepath.Join(t.TempDir(), "owner.sock"))
			require.NoError(t, err)
			inbox, err := owner.Alloc(8<<20, Host)
			require.NoError(t, err)
			key, err := inbox.Export()
			require.NoError(t, err)
			ep, err := e.Dial(ctx, "unix", ln.Addr())
			require.NoError(t, err)
			msg, err := e.Alloc(4<<20, Host)
			require.NoError(t, err)
			var ls []Slice
			var ks []RemoteKey
			for i := range 64 {
				ls = append(ls, msg.Slice(i*(64<<10), 64<<10))
				ks = append(ks, key.Slice(2*i*(64<<10), 64<<10))
			}
			return e, func() error {
				err := ep.PutList(ctx, ls, ks).Wait(ctx)
				if errors.Is(err, ErrPeer) {
					return nil // the connection Close tore down: not a memory fault
				}
				return err
			}
		}},
		{"TCP inline Put", func(t *testing.T) (*Engine, func() error) {
			owner := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP})
			e := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP})
			ln, err := owner.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			inbox, err := owner.Alloc(64<<10, Host)
			require.NoError(t, err)
			key, err := inbox.Export()
			require.NoError(t, err)
			ep, err := e.Dial(ctx, "tcp", ln.Addr())
			require.NoError(t, err)
			msg, err := e.Alloc(64<<10, Host) // <= tcpInlineMax: sent by the caller
			require.NoError(t, err)
			return e, func() error {
				err := ep.Put(ctx, msg.All(), key).Wait(ctx)
				if errors.Is(err, ErrPeer) {
					return nil // the connection Close tore down: not a memory fault
				}
				return err
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, do := tc.setup(t)
			parked, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			park := func() { once.Do(func() { close(parked); <-resume }) }
			e.gate.SetHook(&park)
			waited := closeWhileParked(t, e, do, parked, resume) // a copy Close did not wait for faults
			require.True(t, waited, "Close returned while a copy was in flight")
		})
	}
}

// closeWhileParked runs do on a goroutine, waits until it is parked
// (parked closed: the caller's hook holds it until resume is closed),
// then calls e.Close and reports whether Close waited for it (Close's
// drain hook ran) rather than returning meanwhile. It lets the call go
// on, and checks that the call succeeded or failed with ErrClosed, and
// that Close succeeded.
func closeWhileParked(t *testing.T, e *Engine, do func() error, parked, resume chan struct{}) (waited bool) {
	t.Helper()
	waiting := make(chan struct{})
	var wonce sync.Once
	onDrain := func() { wonce.Do(func() { close(waiting) }) }
	e.hookDrain.Store(&onDrain)

	res := make(chan error, 1)
	go func() { res <- do() }()
	select {
	case <-parked:
	case <-time.After(30 * time.Second):
		t.Fatal("the call never reached the hook that parks it")
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	var closeErr error
	closeReturned := false
	select {
	case <-waiting: // Close waits for the parked call
	case closeErr = <-closed:
		closeReturned = true // Close did not wait
	case <-time.After(30 * time.Second):
		close(resume)
		t.Fatal("Close neither waited for the parked call nor returned")
	}
	close(resume)
	if err := <-res; err != nil {
		require.ErrorIs(t, err, ErrClosed)
	}
	if !closeReturned {
		closeErr = <-closed
	}
	require.NoError(t, closeErr)
	return !closeReturned
}

// TestCallsAfterCloseFail: once Close has begun, every gated call fails
// with ErrClosed and touches nothing.
func TestCallsAfterCloseFail(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	ctx := context.Background()
	a, _ := e.Alloc(4096, Host)
	b, _ := e.Alloc(4096, Host)
	require.NoError(t, e.Close())
	require.ErrorIs(t, e.Copy(ctx, a.All(), b.All()).Err(), ErrClosed)
	bt := e.NewBatch()
	bt.Copy(a.All(), b.All())
	require.ErrorIs(t, bt.Submit(ctx).Err(), ErrClosed)
	require.Zero(t, e.gate.Admitted())
}
