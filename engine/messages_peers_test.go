package engine

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/wire"
)

// TestMsgPeerIsNotIdle: at Config.MaxPeers the listener closes "its oldest
// endpoint whose peer never made a request (a connection that said Hello
// and then only heartbeats)". A peer that exchanges application messages
// is not idle: a newcomer must be refused rather than evict it.
func TestMsgPeerIsNotIdle(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			cfg := Config{Devices: DevicesNone, MaxPeers: 1, TCPLanes: 1}
			owner, peer := newEngine(t, cfg), newEngine(t, cfg)
			l := listenLocal(t, owner, network)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a, err := peer.Dial(ctx, network, l.Addr())
			require.NoError(t, err)
			defer a.Close()
			oa, err := l.Accept(ctx)
			require.NoError(t, err)
			require.NoError(t, a.Send(ctx, []byte("hello")))
			m, err := oa.Recv(ctx)
			require.NoError(t, err)
			require.Equal(t, []byte("hello"), m)
			require.NoError(t, oa.Send(ctx, []byte("hi")))
			m, err = a.Recv(ctx)
			require.NoError(t, err)
			require.Equal(t, []byte("hi"), m)

			b, err := peer.Dial(ctx, network, l.Addr())
			if err == nil {
				defer b.Close()
			}
			require.ErrorIs(t, err, ErrTooManyPeers, "a newcomer evicted the peer exchanging messages")
			require.NoError(t, oa.Err())
		})
	}
}

// TestEngineCloseStuckPeers: Engine.Close closes its endpoints one after
// the other, and each Close waits up to 200ms for its Bye to go out: with
// N peers that stopped reading (here: ones that granted a large message
// window, so the application's Sends filled the connection), Close takes
// N×200ms (MaxPeers 1024: over three minutes).
func TestEngineCloseStuckPeers(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 1})
	l, err := e.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	const peers = 20 // one after the other: 4 s; at once: ~200ms
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sending := make(chan error, peers)
	for range peers {
		nc, err := net.Dial("tcp", l.Addr())
		require.NoError(t, err)
		c := wire.NewConn(wire.NewStreamTransport(nc), wire.ConnConfig{MaxFrame: tcp.MaxFrame})
		t.Cleanup(func() { _ = c.Close() })
		h := fakeHello()
		h.Caps |= wire.CapMessages
		require.NoError(t, c.Send(&h))
		f, err := c.Recv(ctx)
		require.NoError(t, err)
		require.Equal(t, wire.TypeHelloAck, f.Header.Type)
		require.NoError(t, c.Send(&wire.MsgCredit{Msgs: 1 << 30, Bytes: 1 << 50}))
		ep, err := l.Accept(ctx)
		require.NoError(t, err)
		go func() {
			msg := make([]byte, MaxMessage)
			for {
				if err := ep.Send(ctx, msg); err != nil {
					sending <- err
					return
				}
			}
		}()
	}
	time.Sleep(time.Second) // every connection full: the Sends block
	start := time.Now()
	require.NoError(t, e.Close())
	took := time.Since(start)
	for range peers {
		<-sending
	}
	require.Less(t, took, 2*time.Second, "Engine.Close with %d peers not reading", peers)
}
