package ctrlchan

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// rawPeer starts a channel whose peer announced caps on one end of an
// in-memory connection; the other end is the peer's, raw. The channel is
// closed (and env waited for) when the test ends.
func rawPeer(t *testing.T, caps wire.Caps) (*Chan, *wire.Conn) {
	t.Helper()
	env := &dptest.Env{}
	a, b := net.Pipe()
	c := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(a), wire.ConnConfig{}), Name: "peer", Peer: wire.Hello{Caps: caps}})
	c.Start(&fakePath{c: c})
	peer := wire.NewConn(wire.NewStreamTransport(b), wire.ConnConfig{})
	t.Cleanup(func() {
		_ = peer.Close()
		require.NoError(t, c.Close())
		env.Wait()
	})
	return c, peer
}

// TestEvictTellsThePeer: Evict (a listener closing the endpoint to make
// room for another peer) says goodbye before it closes the connection,
// with its reason to a peer that announced wire.CapByeReason and with an
// empty Bye (which an older engine takes) to others; the channel's own
// error is the eviction's, though the peer hangs up on the Bye. The
// listener closed the connection without a word: its peer's error was
// "connection lost".
func TestEvictTellsThePeer(t *testing.T) {
	const what = "closed to make room for another peer (it made no request; Config.MaxPeers)"
	for _, tc := range []struct {
		name   string
		caps   wire.Caps
		reason string
	}{
		{"older peer", 0, ""},
		{"peer with CapByeReason", wire.CapByeReason, what},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := rawPeer(t, tc.caps)
			got := make(chan *wire.Bye, 1) // nil: no Bye came
			go func() {                    // the peer reads until the Bye, then hangs up
				defer close(got)
				defer peer.Close()
				for range 100 {
					f, err := peer.Recv(context.Background())
					if err != nil {
						return
					}
					if f.Header.Type == wire.TypeBye {
						var m wire.Bye
						if f.Decode(&m) == nil {
							got <- &m
						}
						return
					}
				}
			}()
			c.Evict(what)
			bye := <-got
			require.NotNil(t, bye, "the peer got no Bye")
			require.Equal(t, tc.reason, bye.Reason)
			<-c.Done()
			require.ErrorIs(t, c.Err(), gxerr.Peer)
			require.ErrorContains(t, c.Err(), what, "the eviction's error, not the peer's hang-up")
		})
	}
}

// TestByeReasonReceived: a Bye's reason is in the channel's error, from
// a peer that announced wire.CapByeReason; from one that did not, a Bye
// with a reason is malformed.
func TestByeReasonReceived(t *testing.T) {
	for _, tc := range []struct {
		name   string
		caps   wire.Caps
		reason string
		want   string
	}{
		{"no reason", wire.CapByeReason, "", "peer closed the endpoint"},
		{"reason", wire.CapByeReason, "closed to make room", `peer closed the endpoint: "closed to make room"`},
		{"reason from a peer that did not announce it", 0, "closed to make room", "malformed frame"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := rawPeer(t, tc.caps)
			go func() { // net.Pipe: a Send waits for the reader
				_ = peer.Send(&wire.Bye{Reason: tc.reason})
			}()
			<-c.Done()
			require.ErrorIs(t, c.Err(), gxerr.Peer)
			require.ErrorContains(t, c.Err(), tc.want)
		})
	}
}

// TestEvictByeNotReset: on a unix socket, Evict while frames of the peer
// are still unread on our side (our reader lagging: held here) delivers
// the Bye. Evict closed the socket right after the Bye, and closing a
// unix socket with unread frames makes the peer's next read fail with
// ECONNRESET before the Bye queued for it: the peer saw "connection
// lost" (engine's TestEvictedPeerIsToldWhy failed so under load). Evict
// now waits for the peer to hang up on the Bye first.
func TestEvictByeNotReset(t *testing.T) {
	c := byeNotReset(t, func(c *Chan) { c.Evict("closed to make room") })
	require.ErrorContains(t, c.Err(), "closed to make room")
}

// TestCloseByeNotReset: Close, as Evict (TestEvictByeNotReset): on a
// unix socket the peer read a reset, not the Bye (nor what was queued
// before it), when frames of the peer were unread on our side.
func TestCloseByeNotReset(t *testing.T) {
	closed := make(chan error, 1)
	c := byeNotReset(t, func(c *Chan) { go func() { closed <- c.Close() }() })
	require.NoError(t, <-closed)
	require.ErrorIs(t, c.Err(), gxerr.Closed)
}

// byeNotReset starts a channel on a unix socket whose reader is held
// with a frame of the peer unread behind, has end say goodbye, and checks
// that the peer, reading up to the Bye and then hanging up as an engine
// does, reads the Bye; it returns the channel once it has failed.
func byeNotReset(t *testing.T, end func(c *Chan)) *Chan {
	return byeNotResetOver(t, func(c *ipc.Conn) wire.Transport { return c }, end)
}

// wrappedIPC is a unix socket transport wrapped (as a user's transport
// adding counters, say, would): its type is not *ipc.Conn.
type wrappedIPC struct{ *ipc.Conn }

// TestCloseByeNotResetWrapped: Close over a wrapped unix socket waits
// for the peer to hang up as over the bare one (TestCloseByeNotReset):
// the transport says it (ipc.Conn.AwaitsHangUp). linger recognised a
// unix socket by its type, *ipc.Conn, so a wrapper lost the wait, and
// the peer read a reset rather than the Bye.
func TestCloseByeNotResetWrapped(t *testing.T) {
	closed := make(chan error, 1)
	c := byeNotResetOver(t, func(c *ipc.Conn) wire.Transport { return wrappedIPC{c} }, func(c *Chan) { go func() { closed <- c.Close() }() })
	require.NoError(t, <-closed)
	require.ErrorIs(t, c.Err(), gxerr.Closed)
}

// byeNotResetOver is byeNotReset with our side's socket wrapped by wrap.
func byeNotResetOver(t *testing.T, wrap func(*ipc.Conn) wire.Transport, end func(c *Chan)) *Chan {
	ours, theirs := unixConns(t)
	env := &dptest.Env{}
	// Our reader stops at the peer's first heartbeat until released.
	p, held, release := heldAtHeartbeat()
	c := New(Config{Env: env, Conn: wire.NewConn(wrap(ours), wire.ConnConfig{}), Name: "peer", Peer: wire.Hello{Caps: wire.CapByeReason}})
	p.c = c
	c.Start(p)
	t.Cleanup(func() {
		release()
		require.NoError(t, c.Close())
		env.Wait()
	})
	peer := wire.NewConn(theirs, wire.ConnConfig{})
	require.NoError(t, peer.Send(&wire.Heartbeat{}))
	<-held
	require.NoError(t, peer.Send(&wire.Heartbeat{})) // unread: our reader is held
	got := make(chan error, 1)
	go func() { // the peer reads up to the Bye, then hangs up
		defer peer.Close()
		for range 100 {
			f, err := peer.Recv(context.Background())
			if err != nil {
				got <- err
				return
			}
			if f.Header.Type == wire.TypeBye {
				got <- nil
				return
			}
		}
		got <- errors.New("no Bye in 100 frames")
	}()
	end(c)
	require.NoError(t, <-got, "the peer's read")
	release()
	<-c.Done()
	return c
}
