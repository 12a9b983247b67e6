package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/ctrlchan"
	"github.com/gxfer/gxfer/wire"
)

// The "messages" group of the endpoint suite (Send, Recv), run over every
// transport by TestEndpointSuite.
var messageSuite = []struct {
	name string
	run  func(t *testing.T, p epPair)
}{
	{"order", suiteMsgOrder},
	{"back-pressure", suiteMsgBackPressure},
	{"sizes", suiteMsgSizes},
	{"peer closes", suiteMsgPeerCloses},
	{"try and wait", suiteMsgTryWait},
	{"notification after data", suiteMsgAfterData},
}

// seqMsg is message i of size n (at least 8 bytes: i, then i's bytes).
func seqMsg(i, n int) []byte {
	b := make([]byte, max(n, 8))
	binary.LittleEndian.PutUint64(b, uint64(i))
	for k := 8; k < len(b); k++ {
		b[k] = byte(i + k)
	}
	return b
}

// checkSeq reports whether m is seqMsg(i, n) for some n.
func checkSeq(m []byte, i int) error {
	if len(m) < 8 || !bytes.Equal(m, seqMsg(i, len(m))) {
		got := -1
		if len(m) >= 8 {
			got = int(binary.LittleEndian.Uint64(m))
		}
		return fmt.Errorf("message %d: got message %d (%d bytes)", i, got, len(m))
	}
	return nil
}

// sendSeq sends messages from..to-1 of sizes size(i) on ep, on a
// goroutine; the channel gets the first error (or nil).
func sendSeq(ctx context.Context, ep *Endpoint, from, to int, size func(int) int) <-chan error {
	errc := make(chan error, 1)
	go func() {
		for i := from; i < to; i++ {
			if err := ep.Send(ctx, seqMsg(i, size(i))); err != nil {
				errc <- fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
		errc <- nil
	}()
	return errc
}

// recvSeq takes messages from..to-1 from ep, in order.
func recvSeq(t *testing.T, ctx context.Context, ep *Endpoint, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		m, err := ep.Recv(ctx)
		require.NoError(t, err, "recv %d", i)
		require.NoError(t, checkSeq(m, i))
	}
}

// suiteMsgOrder: thousands of messages of varied sizes each way at once
// arrive in order, each once; the statistics count them.
func suiteMsgOrder(t *testing.T, p epPair) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 5000
	size := func(i int) int { return i * 37 % 3000 }
	ab := sendSeq(ctx, p.ab, 0, n, size)
	ba := sendSeq(ctx, p.ba, 0, n, func(i int) int { return 8 + i%5 })
	recvSeq(t, ctx, p.ba, 0, n)
	recvSeq(t, ctx, p.ab, 0, n)
	require.NoError(t, <-ab)
	require.NoError(t, <-ba)
	var bytesOut uint64
	for i := range n {
		bytesOut += uint64(max(size(i), 8))
	}
	st := p.ab.Stats()
	require.Equal(t, uint64(n), st.MsgsOut)
	require.Equal(t, bytesOut, st.MsgBytesOut)
	require.Equal(t, uint64(n), st.MsgsIn)
	in := p.ba.Stats()
	require.Equal(t, uint64(n), in.MsgsIn)
	require.Equal(t, bytesOut, in.MsgBytesIn)
}

// suiteMsgBackPressure: a receiver that does not read makes Send block
// once the window is spent (messages, then bytes); ctx bounds the wait
// with ErrTimeout and the message is not sent; once Recv drains, sending
// resumes and nothing is lost or duplicated.
func suiteMsgBackPressure(t *testing.T, p epPair) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	small := func(int) int { return 8 }
	const w = ctrlchan.MsgWindow
	require.NoError(t, <-sendSeq(ctx, p.ab, 0, w, small), "the whole window goes out without the receiver reading")
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	err := p.ab.Send(short, seqMsg(-1, 8))
	cancel2()
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, p.ab.Err(), "a timed-out Send does not fail the endpoint")

	more := sendSeq(ctx, p.ab, w, 2*w+44, small)
	recvSeq(t, ctx, p.ba, 0, 2*w+44)
	require.NoError(t, <-more)

	// The bytes of the window: messages of MaxMessage bytes go out while
	// the credit lasts, then Send blocks with messages left in the window.
	big := func(int) int { return MaxMessage }
	taken := 2*w + 44 // returned in batches of a quarter window
	settled := uint64(w + taken/(w/4)*(w/4) - taken)
	for n, _ := p.ab.ch.MsgCredit(); n != settled; n, _ = p.ab.ch.MsgCredit() {
		select {
		case <-ctx.Done():
			t.Fatalf("credit of %d messages, want %d once the returns arrived", n, settled)
		case <-time.After(time.Millisecond):
		}
	}
	sent := 0
	for {
		n, b := p.ab.ch.MsgCredit()
		if b < MaxMessage {
			require.NotZero(t, n, "the window of messages is not what ran out")
			break
		}
		require.NoError(t, p.ab.Send(ctx, seqMsg(2*w+44+sent, MaxMessage)))
		sent++
	}
	require.LessOrEqual(t, sent, ctrlchan.MsgWindowBytes/MaxMessage)
	require.GreaterOrEqual(t, sent, ctrlchan.MsgWindowBytes/MaxMessage*3/4)
	short, cancel4 := context.WithTimeout(ctx, 50*time.Millisecond)
	err = p.ab.Send(short, seqMsg(-1, MaxMessage))
	cancel4()
	require.ErrorIs(t, err, ErrTimeout)
	from := 2*w + 44 + sent
	more = sendSeq(ctx, p.ab, from, from+100, big)
	recvSeq(t, ctx, p.ba, 2*w+44, from+100)
	require.NoError(t, <-more)
	short, cancel3 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel3()
	_, err = p.ba.Recv(short)
	require.ErrorIs(t, err, ErrTimeout, "nothing more arrived")
}

// suiteMsgSizes: empty and MaxMessage-byte messages go through; a larger
// one is refused with ErrInvalid and the endpoint goes on.
func suiteMsgSizes(t *testing.T, p epPair) {
	ctx := context.Background()
	require.ErrorIs(t, p.ab.Send(ctx, make([]byte, MaxMessage+1)), ErrInvalid)
	full := seqMsg(7, MaxMessage)
	for _, m := range [][]byte{nil, {}, full, []byte("x")} {
		require.NoError(t, p.ab.Send(ctx, m))
		got, err := p.ba.Recv(ctx)
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Equal(t, len(m), len(got))
		require.True(t, bytes.Equal(m, got))
	}
	require.NoError(t, p.ab.Err())
	require.ErrorIs(t, p.ab.Send(nil, nil), ErrInvalid) //nolint:staticcheck // a nil context is refused
}

// suiteMsgPeerCloses: the messages that arrived before the peer closed are
// still returned by Recv, then ErrPeer; Send fails with ErrPeer; on the
// side that closed, ErrClosed.
func suiteMsgPeerCloses(t *testing.T, p epPair) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, <-sendSeq(ctx, p.ba, 0, 3, func(int) int { return 100 }))
	for p.ab.Stats().MsgsIn < 3 {
		select {
		case <-ctx.Done():
			t.Fatal("the messages did not arrive")
		case <-time.After(time.Millisecond):
		}
	}
	require.NoError(t, p.ba.Close())
	select {
	case <-p.ab.Done():
	case <-ctx.Done():
		t.Fatal("the endpoint did not notice its peer closed")
	}
	recvSeq(t, ctx, p.ab, 0, 3)
	_, err := p.ab.Recv(ctx)
	require.ErrorIs(t, err, ErrPeer)
	require.ErrorIs(t, p.ab.Send(ctx, []byte("late")), ErrPeer)
	// The side that closed: ErrClosed, also when its reader saw the
	// connection end (the peer, told, closing) before Close failed it.
	require.ErrorIs(t, p.ba.Send(ctx, []byte("late")), ErrClosed)
	_, err = p.ba.Recv(ctx)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, p.ba.Err(), ErrClosed)
}

// suiteMsgTryWait: TryRecv takes nothing when nothing arrived and
// WaitRecv waits for ctx then; messages taken by WaitRecv then TryRecv
// arrive in order, each once (WaitRecv takes none: it returns at once
// while one is there); once the peer closed, WaitRecv returns and TryRecv
// gives what is left, then ErrPeer.
func suiteMsgTryWait(t *testing.T, p epPair) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, ok, err := p.ab.TryRecv()
	require.NoError(t, err)
	require.False(t, ok, "a message before any was sent")
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	require.ErrorIs(t, p.ab.WaitRecv(short), ErrTimeout)
	cancelShort()

	const n = 500
	errc := sendSeq(ctx, p.ba, 0, n, func(i int) int { return 8 + i%300 })
	for i := 0; i < n; {
		require.NoError(t, p.ab.WaitRecv(ctx), "wait %d", i)
		require.NoError(t, p.ab.WaitRecv(ctx), "a second wait for %d", i) // nothing taken
		m, ok, err := p.ab.TryRecv()
		require.NoError(t, err, "try %d", i)
		require.True(t, ok, "WaitRecv returned, but nothing to take (%d)", i)
		require.NoError(t, checkSeq(m, i))
		i++
	}
	require.NoError(t, <-errc)

	require.NoError(t, <-sendSeq(ctx, p.ba, n, n+2, func(int) int { return 64 }))
	for p.ab.Stats().MsgsIn < n+2 {
		select {
		case <-ctx.Done():
			t.Fatal("the messages did not arrive")
		case <-time.After(time.Millisecond):
		}
	}
	require.NoError(t, p.ba.Close())
	<-p.ab.Done()
	for i := n; i < n+2; i++ {
		require.NoError(t, p.ab.WaitRecv(ctx))
		m, ok, err := p.ab.TryRecv()
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, checkSeq(m, i))
	}
	require.NoError(t, p.ab.WaitRecv(ctx), "a failed endpoint has nothing to wait for")
	_, ok, err = p.ab.TryRecv()
	require.False(t, ok)
	require.ErrorIs(t, err, ErrPeer)
}

// suiteMsgAfterData: a Put, then a Send naming it; when the message
// arrives the receiver checks the bytes in its buffer, thousands of
// rounds, small Puts into slots and every 64th round a large one. The
// sender runs at most a window of messages ahead of the receiver, so
// slots are reused only after their round was checked.
func suiteMsgAfterData(t *testing.T, p epPair) {
	const (
		rounds   = 2000
		slot     = 1024
		slots    = 2 * ctrlchan.MsgWindow
		bigEvery = 64
		bigSize  = 1 << 20
		bigs     = slots / bigEvery
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	small, err := p.a.Alloc(slot, Host)
	require.NoError(t, err)
	large, err := p.a.Alloc(bigSize, Host)
	require.NoError(t, err)
	rs, rsk := exported(t, p.b, slots*slot, Host)
	rl, rlk := exported(t, p.b, bigs*bigSize, Host)

	errc := make(chan error, 1)
	go func() { // the receiver
		want := make([]byte, bigSize)
		for i := range rounds {
			m, err := p.ba.Recv(ctx)
			if err != nil {
				errc <- fmt.Errorf("recv %d: %w", i, err)
				return
			}
			if err := checkSeq(m, i); err != nil {
				errc <- err
				return
			}
			var got []byte
			if i%bigEvery == 0 {
				k := i / bigEvery % bigs
				got, want = rl.Bytes()[k*bigSize:(k+1)*bigSize], want[:bigSize]
			} else {
				got, want = rs.Bytes()[i%slots*slot:][:slot], want[:slot]
			}
			fill(want, uint64(i)+1)
			if !bytes.Equal(got, want) {
				errc <- fmt.Errorf("round %d: the message arrived before the Put's bytes", i)
				return
			}
		}
		errc <- nil
	}()
	for i := range rounds {
		var (
			src Slice
			dst RemoteKey
		)
		if i%bigEvery == 0 {
			src, dst = large.All(), rlk.Slice(i/bigEvery%bigs*bigSize, bigSize)
		} else {
			src, dst = small.All(), rsk.Slice(i%slots*slot, slot)
		}
		fill(src.Buffer().Bytes(), uint64(i)+1)
		require.NoError(t, p.ab.PutSync(ctx, src, dst), "round %d", i)
		require.NoError(t, p.ab.Send(ctx, seqMsg(i, 8)), "round %d", i)
	}
	require.NoError(t, <-errc)
}

// TestMsgPeerWithoutMessages: an engine that does not announce
// CapMessages (an older one) is never sent a message or a credit (it
// would fail the connection on an unknown frame type); Send says
// ErrNotSupported.
func TestMsgPeerWithoutMessages(t *testing.T) {
	e := newEngine(t, Config{Transport: TransportTCP})
	l, err := e.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	fp := dialFake(t, l.Addr())
	ctx := context.Background()
	ep, err := l.Accept(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, ep.Send(ctx, []byte("x")), ErrNotSupported)
	require.NoError(t, ep.Close())
	for {
		f, err := fp.c.Recv(ctx)
		if err != nil {
			break
		}
		require.NotContains(t, []wire.Type{wire.TypeAppMsg, wire.TypeMsgCredit}, f.Header.Type)
	}
}

// TestMsgRingOnUnix: the messages of a unix endpoint go through the
// shared-memory rings both ways (after the first Send found the grant),
// those of the other transports on the connection.
func TestMsgRingOnUnix(t *testing.T) {
	for _, pm := range pairMakers {
		if pm.name == "rdma" {
			continue
		}
		t.Run(pm.name, func(t *testing.T) {
			p := pm.make(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, ep := range []struct{ from, to *Endpoint }{{p.ab, p.ba}, {p.ba, p.ab}} {
				require.NoError(t, ep.from.Send(ctx, []byte("ring?")))
				m, err := ep.to.Recv(ctx)
				require.NoError(t, err)
				require.Equal(t, []byte("ring?"), m)
				require.Equal(t, pm.name == "unix", ep.from.ch.MsgRing())
			}
		})
	}
}
