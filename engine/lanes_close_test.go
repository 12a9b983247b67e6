package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/tcp"
)

// TestLanesClosedWithEndpoint: an application closing a dialed TCP
// endpoint closes its lanes as it closes its own connection, with a Bye:
// the peer sees every one of them closed ("peer closed the endpoint"),
// and Close returns once they are. Before, Failed cut the lanes' connections
// (on its goroutine, while the reader's Closed was closing them): the
// peer saw most lanes lost ("connection lost: EOF") and logged each as an
// endpoint that failed.
func TestLanesClosedWithEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard only
	defer cancel()
	cfg := Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 4}
	owner, dialer := newEngine(t, cfg), newEngine(t, cfg)
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	ep, err := dialer.Dial(ctx, "tcp", l.Addr())
	require.NoError(t, err)
	require.Equal(t, 4, ep.Stats().Lanes)
	acc, err := l.Accept(ctx)
	require.NoError(t, err)
	// A Put split over the four connections: the owner serves each lane
	// (it has registered them all).
	const size = 4 << 20
	dst, err := owner.Alloc(size, Host)
	require.NoError(t, err)
	k, err := dst.Export()
	require.NoError(t, err)
	src, err := dialer.Alloc(size, Host)
	require.NoError(t, err)
	require.NoError(t, ep.PutSync(ctx, src.All(), k))
	owner.epMu.Lock()
	var lanes []*Endpoint
	for e := range owner.endpoints {
		if e.lane {
			lanes = append(lanes, e)
		}
	}
	owner.epMu.Unlock()
	require.Len(t, lanes, 3)
	mine := tcp.Lanes(ep.path)
	require.Len(t, mine, 3)

	require.NoError(t, ep.Close())
	for i, c := range mine {
		select {
		case <-c.Done():
		default:
			t.Fatalf("Close returned before lane %d was closed", i)
		}
		require.ErrorIs(t, c.Err(), ErrClosed, "lane %d", i)
	}
	for i, e := range append(lanes, acc) {
		<-e.Done()
		require.ErrorIs(t, e.Err(), ErrPeer, "endpoint %d", i)
		require.Contains(t, e.Err().Error(), "peer closed the endpoint", "endpoint %d", i)
	}
}

// TestEngineCloseByesEveryLane: closing the engine that dialed a TCP
// endpoint closes the endpoint and its lanes with a Bye each: the peer
// sees every one closed ("peer closed the endpoint"), none lost. Before,
// Engine.Close closed the lanes and the endpoint at once, and a lane
// closed first failed its endpoint (gxerr.Closed), which cut the
// endpoint's connection before its Bye went out: the peer saw it lost
// ("connection lost: EOF") and logged it as an endpoint that failed.
func TestEngineCloseByesEveryLane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard only
	defer cancel()
	cfg := Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 4}
	owner := newEngine(t, cfg)
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	const size = 4 << 20
	dst, err := owner.Alloc(size, Host)
	require.NoError(t, err)
	k, err := dst.Export()
	require.NoError(t, err)
	for round := range 50 {
		dialer := newEngine(t, cfg)
		src, err := dialer.Alloc(size, Host)
		require.NoError(t, err)
		ep, err := dialer.Dial(ctx, "tcp", l.Addr())
		require.NoError(t, err)
		acc, err := l.Accept(ctx)
		require.NoError(t, err)
		// A Put split over the four connections: the owner serves each
		// lane (it has registered them all).
		require.NoError(t, ep.PutSync(ctx, src.All(), k))
		eps := []*Endpoint{acc}
		owner.epMu.Lock()
		for e := range owner.endpoints { // those of earlier rounds are gone
			if e.lane {
				eps = append(eps, e)
			}
		}
		owner.epMu.Unlock()
		require.Len(t, eps, 4)
		require.NoError(t, dialer.Close())
		for i, e := range eps {
			<-e.Done()
			require.ErrorIs(t, e.Err(), ErrPeer, "round %d, endpoint %d", round, i)
			require.Contains(t, e.Err().Error(), "peer closed the endpoint", "round %d, endpoint %d", round, i)
		}
	}
}
