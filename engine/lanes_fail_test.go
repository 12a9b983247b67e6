package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/tcp"
)

// TestLaneTransferEndsWithEndpointFailure: a Put on the lane of a TCP
// endpoint whose peer closed its connection ends with the endpoint's
// failure (ErrPeer), like the Put on the endpoint's own connection. Before,
// the endpoint's reader closed the lane as it ended, mostly before the
// goroutine passing the failure to the lanes ran, and the Put on the lane
// ended with ErrClosed ("endpoint closed").
func TestLaneTransferEndsWithEndpointFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard only
	defer cancel()
	cfg := Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 2}
	owner, dialer := newEngine(t, cfg), newEngine(t, cfg)
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	dst, err := owner.Alloc(8192, Host)
	require.NoError(t, err)
	k, err := dst.Export()
	require.NoError(t, err)
	src, err := dialer.Alloc(8192, Host)
	require.NoError(t, err)
	ep, err := dialer.Dial(ctx, "tcp", l.Addr())
	require.NoError(t, err)
	defer ep.Close()
	acc, err := l.Accept(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, ep.Stats().Lanes)

	// Two Puts held in the dialer's gate, their requests registered: the
	// first on the endpoint's connection, the second on its lane (the
	// connection with fewer requests in progress).
	parked, resume := make(chan struct{}, 2), make(chan struct{})
	park := func() { parked <- struct{}{}; <-resume }
	dialer.gate.SetHook(&park)
	futs := make(chan *Future, 2)
	for i := range 2 {
		go func() { futs <- ep.Put(ctx, src.Slice(i*4096, 4096), k.Slice(i*4096, 4096)) }()
		<-parked
	}
	dialer.gate.SetHook(nil)
	require.NoError(t, acc.Close()) // the peer closes: the endpoint fails
	<-ep.Done()
	require.ErrorIs(t, ep.Err(), ErrPeer)
	// The lane fails with the endpoint, on a goroutine of the endpoint's
	// failure: resumed before, the Put on the lane went out on it and
	// could succeed.
	for _, c := range tcp.Lanes(ep.path) {
		<-c.Done()
	}
	close(resume)
	for i := range 2 {
		f := <-futs
		<-f.Done()
		require.ErrorIs(t, f.Err(), ErrPeer, "Put %d", i)
	}
}
