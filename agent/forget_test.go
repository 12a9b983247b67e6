package agent

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// TestForget: an application done with a peer drops it: before Forget
// there was no way to, and the peer, its connection and its address
// stayed until the peer changed or the agent closed. The peer is dropped
// (ErrForgotten), its connection closed (the peer sees it end), its
// address forgotten (Peer: meta.ErrNotFound until it is Connected again);
// Forget again, or of a name never reached, is meta.ErrNotFound.
func TestForget(t *testing.T) {
	tests := []struct {
		name      string
		unix, tcp bool
		transport engine.TransportKind
	}{
		{"unix", true, false, engine.TransportIPC},
		{"tcp", false, true, engine.TransportTCP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			ea, eb := newEngine(t), newEngine(t)
			a := newAgent(t, ea, "a", agentOpts{})
			b := newAgent(t, eb, "b", agentOpts{unix: tt.unix, tcp: tt.tcp})
			dst := alloc(t, eb, 4096, engine.Host)
			require.NoError(t, b.Publish("dst", dst.All()))
			src := alloc(t, ea, 4096, engine.Host)
			addr := b.Metadata().Unix + b.Metadata().TCP
			_, err := a.Connect(ctx, addr)
			require.NoError(t, err)
			require.NoError(t, a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "dst"}}).Wait(ctx))
			p, err := a.Peer(ctx, "b")
			require.NoError(t, err)
			tr, ok := p.Transport()
			require.True(t, ok)
			require.Equal(t, tt.transport, tr)
			ep, err := p.Endpoint(ctx)
			require.NoError(t, err)

			require.NoError(t, a.Forget("b"))
			select {
			case <-p.Done():
			default:
				t.Fatal("Forget returned with the peer still cached")
			}
			select { // closed on the agent's goroutine
			case <-ep.Done():
			case <-ctx.Done():
				t.Fatal("the connection of the peer forgotten stays open")
			}
			require.ErrorIs(t, p.Err(), ErrForgotten)
			require.ErrorIs(t, p.Err(), engine.ErrPeer)
			n, order := a.addrsKept()
			require.Zero(t, n)
			require.Zero(t, order)
			_, err = a.Peer(ctx, "b")
			require.ErrorIs(t, err, meta.ErrNotFound)
			err = p.Write(ctx, []Desc{{Local: src.All(), Section: "dst"}}).Wait(ctx)
			require.ErrorIs(t, err, ErrForgotten)
			require.ErrorIs(t, a.Forget("b"), meta.ErrNotFound, "forgotten already")
			require.ErrorIs(t, a.Forget("nobody"), meta.ErrNotFound)
			require.Eventually(t, func() bool { return b.Stats().Inbound == 0 }, 10*time.Second, time.Millisecond,
				"b's end of the connection closes")

			// Connected again, it is a new peer.
			_, err = a.Connect(ctx, addr)
			require.NoError(t, err)
			require.NoError(t, a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "dst"}}).Wait(ctx))
			p2, err := a.Peer(ctx, "b")
			require.NoError(t, err)
			require.NotSame(t, p, p2)
			require.NoError(t, a.Close())
			require.ErrorIs(t, a.Forget("b"), engine.ErrClosed)
		})
	}
}

// TestForgetInFlight: a transfer in flight on the peer forgotten fails
// with ErrForgotten naming the peer, once the copy that reads its local
// memory (held in the emulated DMA engine) ended: the connection closing
// waits for it before the peer's memory mapped for it is released. The
// bytes are not counted.
func TestForgetInFlight(t *testing.T) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{unix: true})
	rbuf := alloc(t, eb, 1<<20, engine.Host)
	require.NoError(t, b.Publish("g", rbuf.All()))
	_, err := a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	src := alloc(t, ea, 1<<20, engine.Gaudi(0))
	em, err := ea.Emulator(0)
	require.NoError(t, err)
	em.DelayNextCS(1, 2*time.Second)
	bytes0 := a.Stats().Bytes
	x := a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "g"}})
	select {
	case <-x.Done():
		t.Fatalf("transfer done before Forget: %v", x.Err())
	default:
	}
	require.NoError(t, a.Forget("b"))
	err = x.Wait(ctx)
	require.ErrorIs(t, err, ErrForgotten)
	require.ErrorIs(t, err, engine.ErrPeer)
	var pe *PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "b", pe.Name)
	var de *DescError
	require.ErrorAs(t, err, &de)
	require.Equal(t, bytes0, a.Stats().Bytes)
	require.NoError(t, src.Free(), "the local memory is free once the Xfer is done")
}

// TestForgetConcurrent: Forget while other goroutines look the peer up,
// Connect to it, write to it and notify it: every call ends, with nil or
// a typed error (the peer dropped, or its name forgotten; for a Connect,
// only a Forget during it), and the agent still reaches the peer
// afterwards.
func TestForgetConcurrent(t *testing.T) {
	const rounds = 50
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{unix: true, tcp: true})
	dst := alloc(t, eb, 64<<10, engine.Host)
	require.NoError(t, b.Publish("dst", dst.All()))
	src := alloc(t, ea, 64<<10, engine.Host)
	go func() { // b drains its notifications
		for {
			if _, err := b.Recv(ctx); err != nil {
				return
			}
		}
	}()
	typed := func(err error) error {
		if err == nil || errors.Is(err, engine.ErrPeer) || errors.Is(err, meta.ErrNotFound) {
			return nil
		}
		return err
	}
	addrs := []string{b.Metadata().Unix, b.Metadata().TCP}
	_, err := a.Connect(ctx, addrs[0])
	require.NoError(t, err)
	errs := make(chan error, 5*rounds)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range rounds {
			_, err := a.Connect(ctx, addrs[i%2])
			if errors.Is(err, ErrForgotten) {
				err = nil // a Forget came during the Connect
			}
			errs <- err
		}
	})
	wg.Go(func() {
		for i := range rounds {
			errs <- typed(a.Write(ctx, "b", []Desc{{Local: src.Slice(i%16*4096, 4096), Section: "dst", Off: i % 16 * 4096}}).Wait(ctx))
		}
	})
	wg.Go(func() {
		for range rounds {
			errs <- typed(a.Notify(ctx, "b", []byte("n")))
		}
	})
	wg.Go(func() {
		for range rounds {
			p, err := a.Peer(ctx, "b")
			if err == nil {
				_, err = p.Endpoint(ctx)
			}
			errs <- typed(err)
		}
	})
	wg.Go(func() {
		for range rounds {
			errs <- typed(a.Forget("b"))
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	_, err = a.Connect(ctx, addrs[0])
	require.NoError(t, err)
	require.NoError(t, a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "dst"}}).Wait(ctx))
	require.NoError(t, a.Forget("b"))
	require.NoError(t, a.Close())
	require.Zero(t, a.Stats().Outbound)
}

// TestEtcdForget: Forget stops the store watch of a peer found in the
// store, and the name is looked up (and watched) again on its next use.
func TestEtcdForget(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{store: openStore(t, srv.Endpoints())})
	newAgent(t, eb, "b", agentOpts{unix: true, store: openStore(t, srv.Endpoints())})
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, watching(a))
	require.NoError(t, a.Forget("b"))
	require.ErrorIs(t, p.Err(), ErrForgotten)
	require.Empty(t, watching(a))
	require.ErrorIs(t, a.Forget("b"), meta.ErrNotFound)
	lookups := a.Stats().StoreLookups
	p2, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.NotSame(t, p, p2)
	require.Equal(t, lookups+1, a.Stats().StoreLookups)
	require.Equal(t, []string{"b"}, watching(a))
}
