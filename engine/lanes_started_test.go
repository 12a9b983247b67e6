package engine

import (
	"context"
	"net"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/wire"
)

// TestDialLaneFailedBeforeStart: a lane that fails once its Dial opened
// all the lanes but before the endpoint is registered and started (its
// connection cut then) is done without, as one failing while they open:
// the Dial succeeds on fewer connections. Before, the lane's failure
// failed the endpoint, and Dial failed with the lane's error though no
// transfer was ever on the lane.
func TestDialLaneFailedBeforeStart(t *testing.T) {
	logged := &lineSignal{want: "extra TCP lane failed", seen: make(chan struct{})}
	e := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 2, Logger: zerolog.New(logged)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var conns []*wire.Conn
	served := make(chan error, 1)
	lost := make(chan struct{}) // closed when the endpoint's connection ends
	go func() {
		served <- acceptAcked(ln, 2, &conns) // the endpoint's connection and its lane
		defer close(lost)
		for len(conns) > 0 {
			if _, err := conns[0].Recv(context.Background()); err != nil {
				return
			}
		}
	}()
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
		<-lost
	}()
	// Once the endpoint's path opened its lane: the lane is cut, and the
	// Dial goes on once the dialer dealt with that (dropped the lane,
	// logged, or failed the endpoint, its connection closed).
	hook := func(p datapath.Path) {
		if len(tcp.Lanes(p)) == 0 {
			return // the lane's own endpoint
		}
		if err := <-served; err != nil {
			served <- err
			return
		}
		served <- nil
		_ = conns[1].Close()
		select {
		case <-logged.seen:
		case <-lost:
		}
	}
	e.hookPath.Store(&hook)
	ep, err := e.Dial(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, <-served)
	require.NoError(t, err, "Dial failed by a lane that failed before its endpoint started")
	require.NoError(t, ep.Err())
	e.epMu.Lock()
	n := len(e.endpoints)
	e.epMu.Unlock()
	require.Equal(t, 1, n, "the failed lane is kept by the engine")
	require.Empty(t, tcp.Lanes(ep.path))
	require.Equal(t, 1, ep.Stats().Lanes)
	select {
	case <-lost:
		t.Fatal("the endpoint's connection was closed")
	default:
	}
}
