package engine

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/shm"
)

// Issue 17 (cancellation, "unix"): a Put or Get into the peer's Gaudi
// memory is performed by the peer, into or out of a bounce buffer of the
// requester's. Cancelling it while the peer performs it resolves the
// future with ErrCanceled at once (the peer does not touch the local
// buffer, and a Get's copy out of the bounce buffer is dropped), but the
// bounce buffer must stay until the peer has answered: it was freed at
// the cancellation, under the peer's copy (which then reported the
// requester's buffer freed).
func TestIPCCancelWhilePeerPerforms(t *testing.T) {
	for _, put := range []bool{true, false} {
		name := "Get"
		if put {
			name = "Put"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			owner := newEngine(t, Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 64 << 20}})
			peer := newEngine(t, Config{Devices: DevicesNone})
			parked, resume := make(chan struct{}), make(chan struct{})
			var parkOnce, resumeOnce sync.Once
			release := func() { resumeOnce.Do(func() { close(resume) }) }
			t.Cleanup(release) // before the engines' Close (cleanups run last first)
			owner.shm().SetHooks(shm.Hooks{Served: func() {
				parkOnce.Do(func() { close(parked); <-resume })
			}})
			freed := make(chan error, 1)
			peer.shm().SetHooks(shm.Hooks{BounceFreed: func(err error) { freed <- err }})

			l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
			require.NoError(t, err)
			ep, err := peer.Dial(ctx, "unix", l.Addr())
			require.NoError(t, err)
			d, err := owner.Alloc(1<<20, Gaudi(0))
			require.NoError(t, err)
			dk, err := d.Export()
			require.NoError(t, err)
			local, err := peer.Alloc(1<<20, Host)
			require.NoError(t, err)
			fill(local.Bytes(), 7)
			want := bytes.Clone(local.Bytes())

			opCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			var f *Future
			if put {
				f = ep.Put(opCtx, local.All(), dk)
			} else {
				f = ep.Get(opCtx, local.All(), dk)
			}
			select {
			case <-parked: // the peer has copied and not yet answered
			case <-time.After(30 * time.Second):
				t.Fatal("the peer did not serve the request")
			}
			cancel()
			select {
			case <-f.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the canceled operation did not resolve while the peer performs it")
			}
			require.ErrorIs(t, f.Err(), ErrCanceled)
			require.Zero(t, peer.Stats().InFlight)
			select {
			case err := <-freed:
				t.Fatalf("the bounce buffer was freed while the peer performed the request into it (%v)", err)
			default:
			}
			release()
			select {
			case err := <-freed:
				require.NoError(t, err, "the peer's answer: its copy into or out of the bounce buffer")
			case <-time.After(30 * time.Second):
				t.Fatal("the bounce buffer was not freed after the peer answered")
			}
			require.True(t, bytes.Equal(want, local.Bytes()), "the local buffer was touched after the future resolved")
			// The endpoint works on.
			require.NoError(t, ep.PutSync(ctx, local.All(), dk))
		})
	}
}

// cancelPair is an owner engine with a Gaudi buffer of n bytes exported
// (dk), and a peer engine dialed to it over "unix" with a host buffer of
// n bytes (local, filled with a pattern that the owner's buffer does not
// hold).
func cancelPair(t *testing.T, n int) (owner, peer *Engine, ep *Endpoint, dk RemoteKey, local *Buffer) {
	t.Helper()
	ctx := context.Background()
	owner = newEngine(t, Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 64 << 20}})
	peer = newEngine(t, Config{Devices: DevicesNone})
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	ep, err = peer.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	d, err := owner.Alloc(n, Gaudi(0))
	require.NoError(t, err)
	src, err := owner.Alloc(n, Host)
	require.NoError(t, err)
	fill(src.Bytes(), 3)
	require.NoError(t, owner.CopySync(ctx, d.All(), src.All()))
	dk, err = d.Export()
	require.NoError(t, err)
	local, err = peer.Alloc(n, Host)
	require.NoError(t, err)
	fill(local.Bytes(), 7)
	return owner, peer, ep, dk, local
}

// Issue 17 (cancellation, "unix"): a request the peer would perform is
// dropped when ctx ends before it is sent (it was sent anyway, and the
// peer wrote into its memory after the Put had been canceled), and a
// Get's copy out of the bounce buffer is dropped when ctx ends before it
// starts (it ran with no context: the canceled Get overwrote the local
// buffer and reported success).
func TestIPCCancelDropsWhatHasNotStarted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		put      bool
		cancelAt string // the hook at which ctx is canceled
	}{
		{"Put before its request", true, "before request"},
		{"Get before its request", false, "before request"},
		{"Get before its copy out", false, "answered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			_, peer, ep, dk, local := cancelPair(t, 1<<20)
			want := bytes.Clone(local.Bytes())
			opCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			freed := make(chan error, 1)
			h := shm.Hooks{BounceFreed: func(err error) { freed <- err }}
			if tc.cancelAt == "before request" {
				h.BeforeRequest = cancel
			} else {
				h.Answered = cancel
			}
			peer.shm().SetHooks(h)
			var f *Future
			if tc.put {
				f = ep.Put(opCtx, local.All(), dk)
			} else {
				f = ep.Get(opCtx, local.All(), dk)
			}
			require.ErrorIs(t, f.Wait(ctx), ErrCanceled)
			select {
			case err := <-freed: // before the future resolved: nothing was left in flight
				require.ErrorIs(t, err, ErrCanceled)
			default:
				t.Fatal("the future resolved before the bounce buffer was freed: the request was sent")
			}
			require.True(t, bytes.Equal(want, local.Bytes()), "the canceled operation wrote into the local buffer")
			require.Zero(t, peer.Stats().InFlight)
		})
	}
}
