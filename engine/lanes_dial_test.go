package engine

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
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

// TestDialLaneFailedDuringDial: a lane that fails while its Dial is
// still opening the others (its connection cut right after its
// handshake) is done without: the Dial succeeds with the endpoint on
// fewer connections, and the lane is not kept by the engine. Before, the
// lane's failure failed the endpoint (its control channel, not started
// yet), and Dial failed with the lane's error.
func TestDialLaneFailedDuringDial(t *testing.T) {
	logged := &lineSignal{want: "extra TCP lane failed", seen: make(chan struct{})}
	e := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 3, Logger: zerolog.New(logged)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	served := make(chan error, 1)
	var conns []*wire.Conn
	lost := make(chan struct{}) // closed when the endpoint's connection ends
	var reading bool            // lost's reader runs
	fake := make(chan struct{})
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
		<-fake
		if reading {
			<-lost
		}
	}()
	go func() {
		defer close(fake)
		served <- func() error {
			// The endpoint's connection, then its first lane, which is
			// hung up on at once.
			if err := acceptAcked(ln, 2, &conns); err != nil {
				return err
			}
			_ = conns[1].Close()
			// The second lane is answered once the dialer has dealt with
			// the first one's failure: it dropped it (logged), or failed
			// the endpoint (its connection closed).
			c, err := acceptFake(ln)
			if err != nil {
				return err
			}
			conns = append(conns, c)
			reading = true
			go func() {
				defer close(lost)
				for {
					if _, err := conns[0].Recv(context.Background()); err != nil {
						return
					}
				}
			}()
			select {
			case <-logged.seen:
			case <-lost:
			}
			return ackFake(c)
		}()
	}()
	ep, err := e.Dial(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, <-served)
	require.NoError(t, err, "Dial failed by a lane that failed while it opened the lanes")
	require.NoError(t, ep.Err())
	require.Equal(t, 2, ep.Stats().Lanes)
	require.Len(t, tcp.Lanes(ep.path), 1)
	e.epMu.Lock()
	n := len(e.endpoints) // the endpoint and its live lane
	e.epMu.Unlock()
	require.Equal(t, 2, n, "the failed lane is kept by the engine")
	require.Len(t, e.EndpointStats(), 1)
	select {
	case <-lost:
		t.Fatal("the endpoint's connection was closed")
	default:
	}
}

// lineSignal is a log writer that closes seen at the first line
// containing want.
type lineSignal struct {
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lineSignal) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
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
