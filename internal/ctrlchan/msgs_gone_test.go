package ctrlchan

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// TestMsgsKeptWhenSendFindsPeerGone: a peer sends messages and its Bye,
// then closes (here resets) the connection. A Send of ours that finds the
// connection gone (EPIPE, ECONNRESET) while the reader has not read all
// the peer sent yet fails with ErrPeer, but the messages the peer sent are
// still returned by Recv, then the peer's close. The channel used to fail
// at the Send and close the connection, dropping what was unread in the
// socket: a peer's Send then Close could lose its last messages (the
// credit this side returns is what finds the connection gone).
func TestMsgsKeptWhenSendFindsPeerGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	ours, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	theirs := <-accepted
	require.NotNil(t, theirs)

	c, _, held, release := heldReaderChan(t, ours)

	peer := wire.NewConn(wire.NewStreamTransport(theirs), wire.ConnConfig{})
	require.NoError(t, peer.Send(&wire.MsgCredit{Msgs: 1 << 20, Bytes: 1 << 40}))
	require.NoError(t, peer.Send(&wire.Heartbeat{}))
	<-held
	const n = 3
	for i := range n {
		require.NoError(t, peer.Send(&wire.AppMsg{Bytes: seqMsg(i, 100)}))
	}
	require.NoError(t, peer.Send(&wire.Bye{}))
	require.NoError(t, theirs.(*net.TCPConn).SetLinger(0)) // close resets
	require.NoError(t, peer.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The reset reaches our socket at once on loopback; a Send before it
	// would go out (into the reset connection): send until one fails.
	var serr error
	for i := 0; i < 1000 && serr == nil; i++ {
		if serr = c.SendMsg(ctx, []byte("x"), nil); serr == nil {
			time.Sleep(time.Millisecond)
		}
	}
	require.ErrorIs(t, serr, gxerr.Peer)
	release()
	for i := range n {
		m, err := c.RecvMsg(ctx)
		require.NoError(t, err, "message %d the peer sent before it closed", i)
		require.Equal(t, seqMsg(i, 100), m)
	}
	_, err = c.RecvMsg(ctx)
	require.ErrorIs(t, err, gxerr.Peer)
	require.ErrorContains(t, err, "peer closed the endpoint")
}

// heldReaderChan starts a channel on conn whose reader stops at the
// peer's first heartbeat (held is closed then) until release: the frames
// behind it stay unread in the socket. The test's cleanup releases it and
// closes the channel.
func heldReaderChan(t *testing.T, conn net.Conn) (c *Chan, p *fakePath, held <-chan struct{}, release func()) {
	env := &dptest.Env{}
	heldCh, hold := make(chan struct{}), make(chan struct{})
	var once, unhold sync.Once
	release = func() { unhold.Do(func() { close(hold) }) }
	p = &fakePath{handle: func(m wire.Message) (bool, error) {
		if _, ok := m.(*wire.Heartbeat); ok {
			once.Do(func() { close(heldCh); <-hold })
		}
		return false, nil
	}}
	c = New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(conn), wire.ConnConfig{}), Name: "peer", Peer: msgPeer})
	p.c = c
	c.Start(p)
	t.Cleanup(func() {
		release()
		require.NoError(t, c.Close())
		env.Wait()
	})
	return c, p, heldCh, release
}
