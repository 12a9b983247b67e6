package ctrlchan

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// TestCloseDeliversWhatWasSent: Close right after Sends that returned
// (their bytes still in the socket's send buffer, the peer reading
// slowly) while frames of the peer are unread on our side: the peer
// still gets every message, then the Bye. Close used to close the
// socket at once, and a TCP socket closed with unread data is reset:
// the kernel dropped what it had not sent yet, and the peer read part of
// a frame, then "connection reset by peer". (Our reader is held so that
// frames stay unread; in the engine they are the peer's heartbeats and
// credit returns that arrive as it closes.)
func TestCloseDeliversWhatWasSent(t *testing.T) {
	// The peer's receive buffer is small: most of what we send waits in
	// our send buffer.
	ours, theirs := smallWindowPair(t)

	env := &dptest.Env{}
	// Our reader stops at the peer's first heartbeat until released: the
	// frames behind it stay unread in our socket.
	p, held, release := heldAtHeartbeat()
	c := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(ours), wire.ConnConfig{}), Name: "peer", Peer: msgPeer})
	p.c = c
	c.Start(p)
	t.Cleanup(func() {
		release()
		require.NoError(t, c.Close())
		env.Wait()
	})

	peer := wire.NewConn(wire.NewStreamTransport(theirs), wire.ConnConfig{})
	defer peer.Close()
	require.NoError(t, peer.Send(&wire.MsgCredit{Msgs: 1 << 20, Bytes: 1 << 40}))
	require.NoError(t, peer.Send(&wire.Heartbeat{}))
	<-held
	require.NoError(t, peer.Send(&wire.Heartbeat{})) // unread: our reader is held

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n, size = 16, 4096
	for i := range n {
		require.NoError(t, c.SendMsg(ctx, seqMsg(i, size), nil))
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	// The peer reads once Close has failed the channel (closing the
	// socket), or after a while if Close waits for the peer to close.
	for i := 0; i < 50 && p.failed.Load() == 0; i++ {
		time.Sleep(time.Millisecond)
	}

	// The peer reads what we sent: our credit grant, the messages, the Bye.
	var got int
	var bye bool
	for !bye {
		f, err := peer.Recv(ctx)
		require.NoError(t, err, "after %d of %d messages", got, n)
		switch f.Header.Type {
		case wire.TypeAppMsg:
			var am wire.AppMsg
			require.NoError(t, am.DecodePayload(f.Header, f.Payload))
			require.Equal(t, seqMsg(got, size), am.Bytes)
			got++
		case wire.TypeBye:
			bye = true
		}
	}
	require.Equal(t, n, got)
	require.NoError(t, peer.Close()) // the peer, told, closes: our Close may end
	release()
	require.NoError(t, <-closed)
}

// TestSendMsgAfterCloseBegan: a SendMsg called once Close has begun
// fails with gxerr.Closed. Close keeps the channel up while it waits for
// the peer's acknowledgements (up to closeLinger), after its Bye: a
// message sent meanwhile went out behind the Bye, which the peer reads
// as the end, and was lost while SendMsg returned nil.
func TestSendMsgAfterCloseBegan(t *testing.T) {
	// The peer does not read until the end: what we send stays
	// unacknowledged, and Close waits.
	ours, theirs := smallWindowPair(t)

	env := &dptest.Env{}
	p := &fakePath{}
	c := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(ours), wire.ConnConfig{}), Name: "peer", Peer: msgPeer})
	p.c = c
	c.Start(p)
	peer := wire.NewConn(wire.NewStreamTransport(theirs), wire.ConnConfig{})
	defer peer.Close()
	require.NoError(t, peer.Send(&wire.MsgCredit{Msgs: 1 << 20, Bytes: 1 << 40}))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n, size = 16, 4096
	for i := range n {
		require.NoError(t, c.SendMsg(ctx, seqMsg(i, size), nil))
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	for i := 0; i < 5000 && !c.closing.Load(); i++ { // a hang guard only
		time.Sleep(time.Millisecond)
	}
	require.True(t, c.closing.Load())
	err := c.SendMsg(ctx, seqMsg(n, size), nil)
	require.ErrorIs(t, err, gxerr.Closed, "a message sent once Close began")

	// The peer reads what was sent before Close: every message, then the Bye.
	var got int
	for bye := false; !bye; {
		f, err := peer.Recv(ctx)
		if err != nil {
			break // our Close gave up waiting and closed the socket
		}
		switch f.Header.Type {
		case wire.TypeAppMsg:
			got++
		case wire.TypeBye:
			bye = true
		}
	}
	require.LessOrEqual(t, got, n)
	require.NoError(t, peer.Close())
	require.NoError(t, <-closed)
	env.Wait()
}

// smallWindowPair is a TCP connection on loopback, ours accepted and
// theirs dialed with a 4 KiB receive buffer: what we send beyond a few
// KiB waits in our send buffer until they read. The test closes ours
// (through the channel) and theirs.
func smallWindowPair(t *testing.T) (ours, theirs net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	theirs, err = d.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	ours = <-accepted
	require.NotNil(t, ours)
	return ours, theirs
}

// heldAtHeartbeat is a path whose reader stops at the peer's first
// heartbeat (held closes then) until release is called (idempotent).
func heldAtHeartbeat() (p *fakePath, held <-chan struct{}, release func()) {
	h, hold := make(chan struct{}), make(chan struct{})
	var once, unhold sync.Once
	p = &fakePath{handle: func(m wire.Message) (bool, error) {
		if _, ok := m.(*wire.Heartbeat); ok {
			once.Do(func() { close(h); <-hold })
		}
		return false, nil
	}}
	return p, h, func() { unhold.Do(func() { close(hold) }) }
}
