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
