package engine

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/wire"
)

// acceptFake accepts a connection on ln, its handshake not done yet (the
// fake is the listener).
func acceptFake(ln net.Listener) (*wire.Conn, error) {
	nc, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	return wire.NewConn(wire.NewStreamTransport(nc), wire.ConnConfig{MaxFrame: tcp.MaxFrame}), nil
}

// ackFake is the fake listener's side of a handshake on c.
func ackFake(c *wire.Conn) error {
	f, err := c.Recv(context.Background())
	if err != nil {
		return err
	}
	var h wire.Hello
	if err := f.Decode(&h); err != nil {
		return err
	}
	ack, err := wire.Negotiate(fakeHello(), h)
	if err != nil {
		return err
	}
	return c.Send(&ack)
}

// TestCloseWhileDialOpensLanes: Engine.Close while a TCP Dial is opening
// its lanes (one is open, the next one's handshake in flight) ends the
// Dial with ErrClosed and returns. It used to deadlock: the Dial, finding
// the engine closed, closed its open lane while holding the engine's
// endpoint lock, which the lane's failure takes; Close waited for the
// Dial.
func TestCloseWhileDialOpensLanes(t *testing.T) {
	e, err := New(Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 3})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var conns []*wire.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	served := make(chan error, 1)
	go func() {
		served <- func() error {
			// The endpoint's connection and its first lane are answered.
			if err := acceptAcked(ln, 2, &conns); err != nil {
				return err
			}
			// The second lane's Hello is not.
			c, err := acceptFake(ln)
			if err != nil {
				return err
			}
			conns = append(conns, c)
			_, err = c.Recv(context.Background())
			return err
		}()
	}()
	dialed := make(chan error, 1)
	go func() {
		_, err := e.Dial(context.Background(), "tcp", ln.Addr().String())
		dialed <- err
	}()
	require.NoError(t, <-served)
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Engine.Close deadlocked with a Dial opening its lanes")
	}
	require.ErrorIs(t, <-dialed, ErrClosed)
}

// TestDialLaneFailedDuringDial: an endpoint whose lane failed while its
// Dial was still opening the others (the lane's failure fails the
// endpoint, whose channel was not started yet) is not kept by the engine.
// Dial used to return it, failed already, and leave it among the live
// endpoints (EndpointStats, Stats) until Engine.Close.
func TestDialLaneFailedDuringDial(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 3})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	served := make(chan error, 1)
	var conns []*wire.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	go func() {
		served <- func() error {
			// The endpoint's connection, then its first lane, which is
			// hung up on at once.
			if err := acceptAcked(ln, 2, &conns); err != nil {
				return err
			}
			_ = conns[1].Close()
			// The second lane is answered once the endpoint has failed
			// (its connection closed).
			c, err := acceptFake(ln)
			if err != nil {
				return err
			}
			conns = append(conns, c)
			if _, err := conns[0].Recv(context.Background()); err == nil {
				return errors.New("a frame on the endpoint's connection")
			}
			return ackFake(c)
		}()
	}()
	ep, err := e.Dial(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, <-served)
	if err == nil {
		require.Error(t, ep.Err(), "Dial returned an endpoint that is up")
	} else {
		require.ErrorIs(t, err, ErrPeer)
	}
	require.Empty(t, e.EndpointStats(), "a failed endpoint is kept as live")
}

// acceptAcked accepts n connections on ln and answers each one's Hello,
// appending them to *conns.
func acceptAcked(ln net.Listener, n int, conns *[]*wire.Conn) error {
	for range n {
		c, err := acceptFake(ln)
		if err != nil {
			return err
		}
		*conns = append(*conns, c)
		if err := ackFake(c); err != nil {
			return err
		}
	}
	return nil
}
