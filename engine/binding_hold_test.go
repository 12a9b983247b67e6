package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestIPCBindingHold: a held binding's Puts and Gets move the bytes as the
// binding's do, its operations are counted at Release, the binding's Close
// proceeds once it is released, and a released Held refuses operations.
func TestIPCBindingHold(t *testing.T) {
	p := startPeer(t)
	e := newEngine(t, Config{Devices: DevicesNone})
	ctx := context.Background()
	ep, err := e.Dial(ctx, "unix", p.path)
	require.NoError(t, err)
	for _, n := range []int{8, 4096} {
		h, _ := e.Alloc(n, Host)
		back, _ := e.Alloc(n, Host)
		put, err := ep.Bind(ctx, h.All(), p.host.Slice(16, n))
		require.NoError(t, err)
		get, err := ep.Bind(ctx, back.All(), p.host.Slice(16, n))
		require.NoError(t, err)
		hp, err := put.Hold()
		require.NoError(t, err)
		hg, err := get.Hold()
		require.NoError(t, err)
		require.NotNil(t, hp.sh, "a unix binding takes the direct path")
		before := e.Stats()
		for i := range 100 {
			fill(h.Bytes(), uint64(i*7+n))
			require.NoError(t, hp.Put())
			require.NoError(t, hg.Get())
			require.Equal(t, h.Bytes(), back.Bytes())
		}
		// Both bindings in use at once: the plain calls still work.
		require.NoError(t, put.Put())
		closed := make(chan error, 1)
		go func() { closed <- put.Close() }()
		hp.Release()
		hp.Release()
		require.NoError(t, <-closed)
		require.ErrorIs(t, hp.Put(), ErrClosed)
		hg.Release()
		require.NoError(t, get.Close())
		_, err = put.Hold()
		require.ErrorIs(t, err, ErrClosed)
		after := e.Stats()
		require.Equal(t, before.Inline+201, after.Inline, "held operations are counted at Release")
		require.NoError(t, h.Free())
		require.NoError(t, back.Free())
	}
}

// TestIPCBindingHoldEngineClose: the engine's Close does not wait forever
// for a held binding: the holder's next Put fails with ErrClosed and
// releases it, and Close completes.
func TestIPCBindingHoldEngineClose(t *testing.T) {
	p := startPeer(t)
	e, err := New(Config{Devices: DevicesNone})
	require.NoError(t, err)
	bd, held := holdPeerSlice(t, e, p, 64)
	require.NoError(t, held.Put())
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	for held.Put() == nil {
	}
	require.ErrorIs(t, held.Put(), ErrClosed)
	require.NoError(t, <-closed)
	held.Release()
	require.NoError(t, bd.Close())
}

// TestIPCBindingHoldStale: a held binding whose peer buffer the exporter
// frees fails its Puts with ErrInvalid, as the binding's own do, and is
// still released and closed normally.
func TestIPCBindingHoldStale(t *testing.T) {
	p := startPeer(t)
	e := newEngine(t, Config{Devices: DevicesNone})
	bd, held := holdPeerSlice(t, e, p, 64)
	require.NoError(t, held.Put())
	p.command(t, "realloc")
	p.readKeys(t)
	require.Eventually(t, func() bool { return held.Put() != nil }, 5*time.Second, time.Millisecond)
	require.ErrorIs(t, held.Put(), ErrInvalid)
	require.ErrorIs(t, held.Get(), ErrInvalid)
	held.Release()
	require.NoError(t, bd.Close())
}

// holdPeerSlice binds a new host buffer of n bytes of e to the first n
// bytes of p's host buffer, over unix, and holds the binding.
func holdPeerSlice(t *testing.T, e *Engine, p *peerProc, n int) (*Binding, *Held) {
	ep, err := e.Dial(context.Background(), "unix", p.path)
	require.NoError(t, err)
	h, err := e.Alloc(n, Host)
	require.NoError(t, err)
	bd, err := ep.Bind(context.Background(), h.All(), p.host.Slice(0, n))
	require.NoError(t, err)
	held, err := bd.Hold()
	require.NoError(t, err)
	return bd, held
}

// TestIPCBindingAfterEngineClose: a unix binding left open over the
// engine's Close fails its calls with ErrClosed, although Close unmapped
// the peer's memory and the owner's validity page under it (the
// binding's checks read that page: they run inside the engine's close
// gate, as its copies do).
func TestIPCBindingAfterEngineClose(t *testing.T) {
	p := startPeer(t)
	e, err := New(Config{Devices: DevicesNone})
	require.NoError(t, err)
	ctx := context.Background()
	ep, err := e.Dial(ctx, "unix", p.path)
	require.NoError(t, err)
	h, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	bd, err := ep.Bind(ctx, h.All(), p.host.Slice(16, 4096))
	require.NoError(t, err)
	require.NoError(t, bd.Put())
	require.NoError(t, e.Close())
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Put", bd.Put},
		{"Get", bd.Get},
		{"PutN", func() error { return bd.PutN(3) }},
		{"Flush", bd.Flush},
		{"Hold", func() error { _, err := bd.Hold(); return err }},
	} {
		require.ErrorIs(t, c.call(), ErrClosed, c.name)
	}
	require.NoError(t, bd.Close())
}
