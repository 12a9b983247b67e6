package ctrlchan

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

var msgPeer = wire.Hello{Caps: wire.CapMessages}

// msgPair connects two channels that exchange messages, each granting
// the other window messages.
func msgPair(t *testing.T, window int) (a, b *Chan) {
	t.Helper()
	env := &dptest.Env{}
	ca, cb := net.Pipe()
	a = New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(ca), wire.ConnConfig{}), Name: "b", Dialer: true, Peer: msgPeer, MsgWindow: window})
	b = New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(cb), wire.ConnConfig{}), Name: "a", Peer: msgPeer, MsgWindow: window})
	startPair(t, env, a, b)
	return a, b
}

// rawMsgChan starts a channel granting window messages and windowBytes
// bytes (1: the least, wire.MaxAppMsg) to a raw peer, whose conn it
// returns; what the channel sends is read and decoded into frames.
func rawMsgChan(t *testing.T, window, windowBytes int) (*Chan, *wire.Conn, <-chan wire.Frame) {
	t.Helper()
	env := &dptest.Env{}
	a, raw := net.Pipe()
	p := &fakePath{handle: func(wire.Message) (bool, error) { return false, nil }}
	c := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(a), wire.ConnConfig{}), Name: "raw", Peer: msgPeer, MsgWindow: window, MsgWindowBytes: windowBytes})
	p.c = c
	c.Start(p)
	peer := wire.NewConn(wire.NewStreamTransport(raw), wire.ConnConfig{})
	frames := make(chan wire.Frame, 1024)
	go func() {
		defer close(frames)
		for {
			f, err := peer.Recv(context.Background())
			if err != nil {
				return
			}
			f.Payload = bytes.Clone(f.Payload)
			select {
			case frames <- f:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		_ = peer.Close()
		for range frames {
		}
		env.Wait()
	})
	return c, peer, frames
}

func seqMsg(i int, n int) []byte {
	b := make([]byte, max(n, 8))
	binary.LittleEndian.PutUint64(b, uint64(i))
	return b
}

// TestMsgsInOrder: thousands of messages through a small window arrive in
// order, each once; taken ones return credit so the sender never stalls
// for good.
func TestMsgsInOrder(t *testing.T) {
	a, b := msgPair(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 3000
	errc := make(chan error, 1)
	go func() {
		for i := range n {
			if err := a.SendMsg(ctx, seqMsg(i, i%300), nil); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := range n {
		m, err := b.RecvMsg(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(i), binary.LittleEndian.Uint64(m), "message %d", i)
		require.Len(t, m, max(i%300, 8))
	}
	require.NoError(t, <-errc)
	st := a.MsgStats()
	require.Equal(t, uint64(n), st.Out)
	require.Equal(t, uint64(n), b.MsgStats().In)
}

// TestMsgSendBlocks: without credit Send waits, bounded by ctx (a
// Timeout error, nothing sent); the peer taking messages resumes it; the
// before hook runs once per Send, and its error ends the Send.
func TestMsgSendBlocks(t *testing.T) {
	a, b := msgPair(t, 4)
	ctx := context.Background()
	calls := 0
	before := func(context.Context) error { calls++; return nil }
	for i := range 4 {
		require.NoError(t, a.SendMsg(ctx, seqMsg(i, 8), before))
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := a.SendMsg(short, seqMsg(99, 8), before)
	require.ErrorIs(t, err, gxerr.Timeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 5, calls)
	require.ErrorIs(t, a.SendMsg(ctx, nil, func(context.Context) error { return gxerr.Device }), gxerr.Device)
	for i := range 4 {
		m, err := b.RecvMsg(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(i), binary.LittleEndian.Uint64(m))
	}
	require.NoError(t, a.SendMsg(ctx, seqMsg(4, 8), nil), "credit returned")
	m, err := b.RecvMsg(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(4), binary.LittleEndian.Uint64(m), "the timed-out message was not sent")
	short2, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	_, err = b.RecvMsg(short2)
	require.ErrorIs(t, err, gxerr.Timeout)
	require.ErrorIs(t, a.SendMsg(ctx, make([]byte, wire.MaxAppMsg+1), nil), gxerr.Invalid)
}

// TestMsgNotCapable: a peer that did not announce CapMessages gets no
// Send, and an AppMsg from it (it holds no credit) fails the channel.
func TestMsgNotCapable(t *testing.T) {
	env := &dptest.Env{}
	c, raw := newChan(t, env, true, &fakePath{})
	require.ErrorIs(t, c.SendMsg(context.Background(), []byte("x"), nil), gxerr.NotSupported)
	peer := wire.NewConn(wire.NewStreamTransport(raw), wire.ConnConfig{})
	go func() { _ = peer.Send(&wire.AppMsg{Bytes: []byte("unasked")}) }()
	go func() { _, _ = raw.Read(make([]byte, 4096)) }() // the Bye
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		c.Fail(gxerr.Closed)
		_ = raw.Close()
		t.Fatal("an AppMsg without credit did not fail the channel")
	}
	require.ErrorIs(t, c.Err(), gxerr.Peer)
	require.Contains(t, c.Err().Error(), "beyond the credit")
	require.NoError(t, c.Close())
	_ = raw.Close()
	env.Wait()
}

// TestMsgCreditExceeded: a peer sending beyond the credit it was granted
// (messages or bytes) is failed with a peer error; the messages within
// the credit are still delivered, then the error. A grant overflowing the
// credit fails the channel too.
func TestMsgCreditExceeded(t *testing.T) {
	for _, tc := range []struct {
		name string
		send []wire.Message
		ok   int // messages within the credit
	}{
		{"messages", []wire.Message{&wire.AppMsg{Bytes: []byte("1")}, &wire.AppMsg{Bytes: []byte("2")}, &wire.AppMsg{Bytes: []byte("3")}}, 2},
		{"bytes", []wire.Message{&wire.AppMsg{Bytes: make([]byte, 40<<10)}, &wire.AppMsg{Bytes: make([]byte, 40<<10)}}, 1},
		{"credit overflow", []wire.Message{&wire.AppMsg{Bytes: []byte("1")}, &wire.MsgCredit{Msgs: 1, Bytes: 1<<64 - 1}, &wire.MsgCredit{Msgs: 1, Bytes: 1<<64 - 1}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer, frames := rawMsgChan(t, 2, 1)
			f := <-frames // the initial grant: 2 messages, wire.MaxAppMsg bytes
			var grant wire.MsgCredit
			require.NoError(t, f.Decode(&grant))
			require.Equal(t, wire.MsgCredit{Msgs: 2, Bytes: wire.MaxAppMsg}, grant)
			for _, m := range tc.send {
				require.NoError(t, peer.Send(m))
			}
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the channel did not fail")
			}
			require.ErrorIs(t, c.Err(), gxerr.Peer)
			ctx := context.Background()
			for range tc.ok {
				_, err := c.RecvMsg(ctx)
				require.NoError(t, err)
			}
			_, err := c.RecvMsg(ctx)
			require.ErrorIs(t, err, gxerr.Peer)
			require.ErrorIs(t, c.SendMsg(ctx, nil, nil), gxerr.Peer)
		})
	}
}

// TestMsgCreditReturned: taking a quarter of the window returns it as one
// MsgCredit, granted before it is sent (the peer may spend it at once).
func TestMsgCreditReturned(t *testing.T) {
	c, peer, frames := rawMsgChan(t, 8, 0)
	<-frames
	ctx := context.Background()
	for i := range 8 {
		require.NoError(t, peer.Send(&wire.AppMsg{Bytes: seqMsg(i, 8)}))
	}
	for i := range 2 {
		m, err := c.RecvMsg(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(i), binary.LittleEndian.Uint64(m))
	}
	f := <-frames
	var back wire.MsgCredit
	require.NoError(t, f.Decode(&back))
	require.Equal(t, wire.MsgCredit{Msgs: 2, Bytes: 16}, back)
	// Two more within the returned credit are taken, no violation.
	for i := range 2 {
		require.NoError(t, peer.Send(&wire.AppMsg{Bytes: seqMsg(8+i, 8)}))
	}
	for i := 2; i < 10; i++ {
		m, err := c.RecvMsg(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(i), binary.LittleEndian.Uint64(m))
	}
	require.NoError(t, c.Err())
}

// TestMsgSmallByteWindow: with the least byte window (one largest
// message), credit comes back at every message taken, so a sender of
// messages of every size never waits on a receiver with an empty queue.
func TestMsgSmallByteWindow(t *testing.T) {
	env := &dptest.Env{}
	ca, cb := net.Pipe()
	a := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(ca), wire.ConnConfig{MaxFrame: 2 * wire.MaxAppMsg}), Name: "b", Dialer: true, Peer: msgPeer})
	b := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(cb), wire.ConnConfig{MaxFrame: 2 * wire.MaxAppMsg}), Name: "a", Peer: msgPeer, MsgWindowBytes: 1})
	pa, pb := &fakePath{c: a}, &fakePath{c: b}
	a.Start(pa)
	b.Start(pb)
	defer func() {
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
		env.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sizes := []int{10 << 10, wire.MaxAppMsg, 1, 20 << 10, wire.MaxAppMsg, 8}
	for i, n := range sizes {
		require.NoError(t, a.SendMsg(ctx, seqMsg(i, n), nil), "message %d", i)
		m, err := b.RecvMsg(ctx)
		require.NoError(t, err)
		require.Len(t, m, max(n, 8))
	}
}

// TestMsgSendCtxWhileWriting: a Send whose ctx ends while it writes to a
// peer that does not read (no write timeout), or while it waits for the
// connection another write holds, returns ctx's error at once: the
// message was not sent, its credit not spent, the channel still up; the
// next Send, once the peer reads, is the first message the peer gets. A
// write ctx cut part-way (the stream out of step) fails the channel.
func TestMsgSendCtxWhileWriting(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, c *Chan, raw net.Conn)
		broken bool
	}{
		{"writing", func(*testing.T, *Chan, net.Conn) {}, false},
		{"waiting for the connection", func(t *testing.T, c *Chan, _ net.Conn) {
			require.NoError(t, c.QueueReply(&wire.Heartbeat{}))
			waitFor(t, "the writer to take the reply", func() bool {
				c.replyMu.Lock()
				defer c.replyMu.Unlock()
				return len(c.replyQ) == 0
			})
		}, false},
		{"cut part-way", func(t *testing.T, _ *Chan, raw net.Conn) {
			go func() { _, _ = io.ReadFull(raw, make([]byte, 3)) }() // then reads no more
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &dptest.Env{} // no PeerTimeout: no heartbeats
			a, raw := net.Pipe() // raw reads nothing until the test says so
			p := &fakePath{handle: func(wire.Message) (bool, error) { return false, nil }}
			c := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(a), wire.ConnConfig{}), Name: "raw", Peer: msgPeer})
			p.c = c
			c.Start(p)
			peer := wire.NewConn(wire.NewStreamTransport(raw), wire.ConnConfig{})
			t.Cleanup(func() {
				require.NoError(t, c.Close())
				_ = peer.Close()
				env.Wait()
			})
			f, err := peer.Recv(context.Background()) // the channel's grant
			require.NoError(t, err)
			require.Equal(t, wire.TypeMsgCredit, f.Header.Type)
			require.NoError(t, peer.Send(&wire.MsgCredit{Msgs: 4, Bytes: 1 << 20}))
			waitFor(t, "the credit", func() bool { n, _ := c.MsgCredit(); return n == 4 })
			tc.setup(t, c, raw)

			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			sent := make(chan error, 1)
			go func() { sent <- c.SendMsg(ctx, []byte("first"), nil) }()
			select {
			case err := <-sent:
				require.ErrorIs(t, err, gxerr.Timeout)
				require.ErrorIs(t, err, context.DeadlineExceeded)
			case <-time.After(5 * time.Second):
				t.Fatal("Send did not return when its ctx ended")
			}
			if tc.broken {
				require.ErrorIs(t, c.Err(), gxerr.Peer)
				require.ErrorIs(t, c.Err(), wire.ErrBroken)
				return
			}
			require.NoError(t, c.Err())
			n, b := c.MsgCredit()
			require.Equal(t, []uint64{4, 1 << 20}, []uint64{n, b}, "the credit is not spent")
			require.Zero(t, c.MsgStats().Out)

			frames := make(chan wire.Frame, 16)
			go func() {
				defer close(frames)
				for {
					f, err := peer.Recv(context.Background())
					if err != nil {
						return
					}
					f.Payload = bytes.Clone(f.Payload)
					frames <- f
				}
			}()
			require.NoError(t, c.SendMsg(context.Background(), []byte("second"), nil))
			for f := range frames {
				if f.Header.Type != wire.TypeAppMsg {
					continue
				}
				var am wire.AppMsg
				require.NoError(t, f.Decode(&am))
				require.Equal(t, []byte("second"), am.Bytes, "the first message was not sent")
				break
			}
			require.NoError(t, c.Err())
		})
	}
}
