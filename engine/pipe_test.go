package engine

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/pipe"
	"github.com/gxfer/gxfer/wire"
)

// pipePair connects a and b with the in-memory pair of data paths
// (internal/datapath/pipe): the control channel is a net.Pipe, the data
// moves between the two engines' buffers in this process. It returns a's
// endpoint to b and b's to a.
func pipePair(t testing.TB, a, b *Engine) (ab, ba *Endpoint) {
	t.Helper()
	a.transports.Register(pipe.New(a.env(), b.env()))
	b.transports.Register(pipe.New(b.env(), a.env()))
	ca, cb := net.Pipe()
	wa := wire.NewConn(wire.NewStreamTransport(ca), a.local().ConnConfig(datapath.KindPipe))
	wb := wire.NewConn(wire.NewStreamTransport(cb), b.local().ConnConfig(datapath.KindPipe))
	ctx := context.Background()
	ab, _, err := a.newEndpoint(ctx, wa, b.ident.hello, datapath.KindPipe, "", true)
	require.NoError(t, err)
	ba, _, err = b.newEndpoint(ctx, wb, a.ident.hello, datapath.KindPipe, "", false)
	require.NoError(t, err)
	return ab, ba
}

// TestPipeBindingOwnerFrees: a binding notices that its peer's memory
// went away (Binding's doc): after the owner frees the buffer, Put fails
// with ErrInvalid, as over "unix", instead of writing into it (and
// keeping it alive).
func TestPipeBindingOwnerFrees(t *testing.T) {
	a, b := newEngine(t, Config{Devices: DevicesNone}), newEngine(t, Config{Devices: DevicesNone})
	ab, ba := pipePair(t, a, b)
	defer ab.Close()
	defer ba.Close()
	local, err := a.Alloc(4096, Host)
	require.NoError(t, err)
	rb, rk := exported(t, b, 4096, Host)
	bd, err := ab.Bind(context.Background(), local.All(), rk)
	require.NoError(t, err)
	defer bd.Close()
	require.NoError(t, bd.Put())
	require.NoError(t, rb.Free())
	require.ErrorIs(t, bd.Put(), ErrInvalid, "a Put into a buffer its owner freed")
}

// TestPipeBindingOwnerCloses: the owner engine's Close releases its
// buffers once its own copies are done; a binding of the other engine
// copying into one must not touch it after (it crashed the process).
func TestPipeBindingOwnerCloses(t *testing.T) {
	a := newEngine(t, Config{Devices: DevicesNone})
	b, err := New(Config{Devices: DevicesNone})
	require.NoError(t, err)
	ab, ba := pipePair(t, a, b)
	defer ab.Close()
	defer ba.Close()
	const size = 64 << 20
	local, err := a.Alloc(size, Host)
	require.NoError(t, err)
	_, rk := exported(t, b, size, Host)
	bd, err := ab.Bind(context.Background(), local.All(), rk)
	require.NoError(t, err)
	defer bd.Close()
	closeB := func() { _ = b.Close() } // inside a's gate, before the copy touches memory
	a.gate.SetHook(&closeB)
	err = bd.Put()
	a.gate.SetHook(nil)
	t.Logf("Put: %v", err)
	require.Error(t, err, "Put into the memory of a closed engine")
}
