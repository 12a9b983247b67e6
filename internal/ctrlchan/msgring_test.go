package ctrlchan

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

var ringPeer = wire.Hello{Caps: wire.CapMessages | wire.CapMsgRing | wire.CapFDPassing}

// unixConns is a connected pair of unix sockets (fd passing).
func unixConns(t *testing.T) (a, b *ipc.Conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	l, err := ipc.Listen(path, ipc.Config{})
	require.NoError(t, err)
	defer l.Close()
	ctx := context.Background()
	type res struct {
		c   *ipc.Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := l.Accept(ctx)
		acc <- res{c, err}
	}()
	a, err = ipc.Dial(ctx, path, ipc.Config{})
	require.NoError(t, err)
	r := <-acc
	require.NoError(t, r.err)
	return a, r.c
}

// ringPair connects two channels over a unix socket whose messages go
// through rings, each granting window messages of windowBytes bytes; Recv
// polls for spin before parking.
func ringPair(t *testing.T, window, windowBytes int, spin time.Duration) (a, b *Chan) {
	t.Helper()
	env := &dptest.Env{Cfg: datapath.Config{WaitSpin: spin}}
	ca, cb := unixConns(t)
	cfg := func(c *ipc.Conn, name string, dialer bool) Config {
		return Config{Env: env, Conn: wire.NewConn(c, wire.ConnConfig{}), Name: name, Dialer: dialer, Peer: ringPeer,
			MsgRing: true, MsgWindow: window, MsgWindowBytes: windowBytes}
	}
	a, b = New(cfg(ca, "b", true)), New(cfg(cb, "a", false))
	startPair(t, env, a, b)
	return a, b
}

// waitFor polls cond until it holds (a test's condition on state another
// goroutine changes).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// parked reports whether a Recv on c announced in its ring that it parks.
func parked(c *Chan) bool {
	c.msg.mu.Lock()
	defer c.msg.mu.Unlock()
	return c.msg.rx != nil && c.msg.rx.flag(offRxWait).Load() == 1
}

// TestRingConcurrentSenders: four senders at once, messages of every
// size through a ring of one largest message (it wraps round all the
// time): each sender's messages arrive in its order, each once, counted.
func TestRingConcurrentSenders(t *testing.T) {
	a, b := ringPair(t, 8, 1, 20*time.Microsecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const senders, n = 4, 400
	size := func(i int) int {
		if i%50 == 0 {
			return wire.MaxAppMsg
		}
		return 16 + i*13%700
	}
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	var bytesOut uint64
	for s := range senders {
		for i := range n {
			bytesOut += uint64(size(i))
		}
		wg.Go(func() {
			for i := range n {
				m := make([]byte, size(i))
				binary.LittleEndian.PutUint32(m, uint32(s))
				binary.LittleEndian.PutUint32(m[4:], uint32(i))
				if err := a.SendMsg(ctx, m, nil); err != nil {
					errs <- fmt.Errorf("sender %d message %d: %w", s, i, err)
					return
				}
			}
		})
	}
	next := make([]int, senders)
	for range senders * n {
		m, err := b.RecvMsg(ctx)
		require.NoError(t, err)
		s, i := int(binary.LittleEndian.Uint32(m)), int(binary.LittleEndian.Uint32(m[4:]))
		require.Less(t, s, senders)
		require.Equal(t, next[s], i, "sender %d", s)
		require.Len(t, m, size(i))
		next[s]++
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.True(t, a.msg.txRinged(), "the messages went through the ring")
	require.Equal(t, MsgStats{Out: senders * n, OutBytes: bytesOut}, MsgStats{Out: a.MsgStats().Out, OutBytes: a.MsgStats().OutBytes})
	in := b.MsgStats()
	require.Equal(t, uint64(senders*n), in.In)
	require.Equal(t, bytesOut, in.InBytes)
}

// TestRingBackPressure: a sender that spent the window waits (bounded by
// ctx, nothing sent); one parked waiting is woken by the bell of the
// receiver returning credit.
func TestRingBackPressure(t *testing.T) {
	a, b := ringPair(t, 4, 0, 0)
	ctx := context.Background()
	for i := range 4 {
		require.NoError(t, a.SendMsg(ctx, seqMsg(i, 8), nil))
	}
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	err := a.SendMsg(short, seqMsg(99, 8), nil)
	require.ErrorIs(t, err, gxerr.Timeout)
	n, _ := a.MsgCredit()
	require.Zero(t, n)
	sent := make(chan error, 1)
	go func() { sent <- a.SendMsg(ctx, seqMsg(4, 8), nil) }()
	waitFor(t, "the sender to wait for credit", func() bool {
		b.msg.mu.Lock()
		defer b.msg.mu.Unlock()
		return b.msg.rx.flag(offTxWait).Load() == 1
	})
	for i := range 5 {
		m, err := b.RecvMsg(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(i), binary.LittleEndian.Uint64(m), "the timed-out message was not sent")
	}
	require.NoError(t, <-sent)
	require.NoError(t, a.Err())
	require.NoError(t, b.Err())
}

// TestRingParkedReceiver: a Recv that parked is woken by the bell that
// comes with the next message (one bell); one polling the ring needs none.
func TestRingParkedReceiver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spin  time.Duration
		bells uint64
	}{
		{"parked", 0, 1},
		{"polling", time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := ringPair(t, 16, 0, tc.spin)
			ctx := context.Background()
			got := make(chan []byte, 1)
			go func() {
				m, _ := b.RecvMsg(ctx)
				got <- m
			}()
			if tc.bells > 0 {
				waitFor(t, "the receiver to park", func() bool { return parked(b) })
			}
			require.NoError(t, a.SendMsg(ctx, []byte("ding"), nil))
			require.Equal(t, []byte("ding"), <-got)
			require.Equal(t, tc.bells, a.MsgStats().Bells)
		})
	}
}

// TestRingCloseWhileSpinning: a Recv polling the ring (for an hour)
// returns at once when its endpoint closes, or its peer does; the
// messages that arrived first are still returned. Nothing leaks
// (TestMain).
func TestRingCloseWhileSpinning(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(a, b *Chan) error
		want  error
	}{
		{"closed", func(_, b *Chan) error { return b.Close() }, gxerr.Closed},
		{"peer closed", func(a, _ *Chan) error { return a.Close() }, gxerr.Peer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := ringPair(t, 16, 0, time.Hour)
			ctx := context.Background()
			for i := range 3 {
				require.NoError(t, a.SendMsg(ctx, seqMsg(i, 100), nil))
			}
			for i := range 3 {
				m, err := b.RecvMsg(ctx)
				require.NoError(t, err)
				require.Equal(t, uint64(i), binary.LittleEndian.Uint64(m))
			}
			errc := make(chan error, 1)
			go func() {
				_, err := b.RecvMsg(ctx)
				errc <- err
			}()
			require.NoError(t, tc.close(a, b))
			select {
			case err := <-errc:
				require.ErrorIs(t, err, tc.want)
			case <-time.After(30 * time.Second):
				t.Fatal("Recv kept polling a closed endpoint")
			}
		})
	}
}

// TestRingRecvCtxWhilePolling: a Recv whose ctx ends while it polls the
// ring (for an hour) returns ctx's error.
func TestRingRecvCtxWhilePolling(t *testing.T) {
	_, b := ringPair(t, 16, 0, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := b.RecvMsg(ctx)
		errc <- err
	}()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, gxerr.Timeout)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second):
		t.Fatal("Recv kept polling after its ctx ended")
	}
}

// TestRingFailKeepsArrived: the messages in the ring when the peer went
// are returned, then the peer error; Send fails, nothing is touched
// after (the rings are unmapped).
func TestRingFailKeepsArrived(t *testing.T) {
	a, b := ringPair(t, 16, 0, 0)
	ctx := context.Background()
	for i := range 5 {
		require.NoError(t, a.SendMsg(ctx, seqMsg(i, 10+i), nil))
	}
	require.Equal(t, uint64(5), b.MsgStats().In, "arrived, not taken")
	require.NoError(t, a.Close())
	<-b.Done()
	for i := range 5 {
		m, err := b.RecvMsg(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(i), binary.LittleEndian.Uint64(m))
	}
	_, err := b.RecvMsg(ctx)
	require.ErrorIs(t, err, gxerr.Peer)
	require.ErrorIs(t, b.SendMsg(ctx, []byte("late"), nil), gxerr.Peer)
	require.Equal(t, uint64(5), b.MsgStats().In)
	require.False(t, b.msg.txRinged())
}

// rawRingChan starts a channel (window 2 messages, the least bytes,
// MsgRing as ring says) on a unix socket to a raw peer, whose conn it
// returns with the frames the channel sends (their fds the test's).
func rawRingChan(t *testing.T, ring bool) (*Chan, *wire.Conn, <-chan wire.Frame) {
	t.Helper()
	env := &dptest.Env{}
	a, raw := unixConns(t)
	p := &fakePath{handle: func(wire.Message) (bool, error) { return false, nil }}
	c := New(Config{Env: env, Conn: wire.NewConn(a, wire.ConnConfig{}), Name: "raw", Peer: ringPeer, MsgRing: ring, MsgWindow: 2, MsgWindowBytes: 1})
	p.c = c
	c.Start(p)
	peer := wire.NewConn(raw, wire.ConnConfig{})
	frames := make(chan wire.Frame, 64)
	go func() {
		defer close(frames)
		for {
			f, err := peer.Recv(context.Background())
			if err != nil {
				return
			}
			f.Payload = append([]byte(nil), f.Payload...)
			select {
			case frames <- f:
			default:
				_ = f.CloseFDs()
			}
		}
	}()
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		_ = peer.Close()
		for f := range frames {
			_ = f.CloseFDs()
		}
		env.Wait()
	})
	return c, peer, frames
}

// mapGrant maps the ring of the channel's MsgRing grant (the first frame)
// as its producer would; grantN overrides the window it may write.
func mapGrant(t *testing.T, frames <-chan wire.Frame, grantN uint64) *txRing {
	t.Helper()
	f := <-frames
	defer f.CloseFDs()
	var mr wire.MsgRing
	require.NoError(t, f.Decode(&mr))
	require.Equal(t, wire.MsgRing{Msgs: 2, Bytes: wire.MaxAppMsg, Size: ringSize(2, wire.MaxAppMsg)}, mr)
	mp, err := ipc.MapShared(f.FDs[0], int(ringHdr+mr.Size))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mp.Close() })
	return &txRing{ringMem: newRingMem(mp.Bytes(), mr.Size), grantN: grantN, grantB: 1 << 40}
}

// TestRingHostilePeer: a peer that writes garbage into the ring it was
// granted or more than it holds (the ring bounds what a receiver buffers),
// returns more than was written into
// the ring it granted, or sends ring frames out of turn fails the channel
// with a peer error; the messages it sent properly before are still
// returned.
func TestRingHostilePeer(t *testing.T) {
	ctx := context.Background()
	producer := []struct {
		name    string
		write   func(tx *txRing)
		ok      int
		wantErr string
	}{
		{"tail beyond the ring", func(tx *txRing) {
			tx.push(seqMsg(0, 8))
			tx.word(offTail).Store(tx.tail + tx.size)
		}, 0, "past the head"},
		{"corrupt record", func(tx *txRing) {
			tx.push(seqMsg(0, 8))
			tx.push(seqMsg(1, 8))
			tx.data[recLen(8)+4] ^= 0xff
		}, 1, "corrupt record header"},
		{"overfilling the ring", func(tx *txRing) { // its window is one largest message
			tx.push(seqMsg(0, wire.MaxAppMsg))
			tx.push(seqMsg(1, wire.MaxAppMsg))
		}, 0, "past the head"},
	}
	for _, tc := range producer {
		t.Run("producer "+tc.name, func(t *testing.T) {
			c, peer, frames := rawRingChan(t, true)
			tx := mapGrant(t, frames, 16)
			tc.write(tx)
			require.NoError(t, peer.Send(&wire.MsgBell{}))
			for i := range tc.ok {
				m, err := c.RecvMsg(ctx)
				require.NoError(t, err)
				require.Equal(t, uint64(i), binary.LittleEndian.Uint64(m))
			}
			_, err := c.RecvMsg(ctx)
			require.ErrorIs(t, err, gxerr.Peer)
			require.ErrorContains(t, err, tc.wantErr)
			require.ErrorIs(t, c.Err(), gxerr.Peer)
		})
	}

	t.Run("consumer returns beyond what was written", func(t *testing.T) {
		c, peer, frames := rawRingChan(t, true)
		<-frames // the channel's own grant
		size := ringSize(4, 1<<20)
		sh, err := ipc.NewShared(int(ringHdr+size), "test-ring")
		require.NoError(t, err)
		defer sh.Close()
		require.NoError(t, peer.Send(&wire.MsgRing{Msgs: 4, Bytes: 1 << 20, Size: size}, sh.FD()))
		require.NoError(t, c.SendMsg(ctx, seqMsg(0, 8), nil))
		rx := &rxRing{ringMem: newRingMem(sh.Bytes(), size)}
		m, ok, err := rx.pop()
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, seqMsg(0, 8), m)
		rx.word(offRetMsgs).Store(100)
		err = c.SendMsg(ctx, seqMsg(1, 8), nil)
		require.ErrorIs(t, err, gxerr.Peer)
		require.ErrorContains(t, err, "returns beyond what was written")
	})

	frames := []struct {
		name    string
		ring    bool // the channel takes rings
		send    func(t *testing.T, peer *wire.Conn)
		wantErr string
	}{
		{"ring too small", true, func(t *testing.T, peer *wire.Conn) { sendRing(t, peer, 4096) }, "message ring of"},
		// A ring larger than its window needs is refused: this side's
		// messages cycle through all of it, so a peer could otherwise make
		// it fault in (and be charged for) far more shared memory than the
		// window lets it have in flight.
		{"ring larger than its window", true, func(t *testing.T, peer *wire.Conn) {
			sendRingWindow(t, peer, 2, wire.MaxAppMsg, ringSize(2, wire.MaxAppMsg)+8)
		}, "message ring of"},
		{"window over the bound", true, func(t *testing.T, peer *wire.Conn) {
			sendRingWindow(t, peer, 1<<20, 1<<40, maxRingSize+8)
		}, "message ring of"},
		{"second ring", true, func(t *testing.T, peer *wire.Conn) {
			sendRing(t, peer, ringSize(2, wire.MaxAppMsg))
			sendRing(t, peer, ringSize(2, wire.MaxAppMsg))
		}, "a second message ring"},
		{"ring not offered", false, func(t *testing.T, peer *wire.Conn) { sendRing(t, peer, ringSize(2, wire.MaxAppMsg)) }, "without them"},
		{"bell without rings", false, func(t *testing.T, peer *wire.Conn) { require.NoError(t, peer.Send(&wire.MsgBell{})) }, "without rings"},
		{"message on the socket", true, func(t *testing.T, peer *wire.Conn) {
			require.NoError(t, peer.Send(&wire.AppMsg{Bytes: []byte("beside the ring")}))
		}, "on the socket"},
		{"credit on a ring", true, func(t *testing.T, peer *wire.Conn) {
			sendRing(t, peer, ringSize(2, wire.MaxAppMsg))
			require.NoError(t, peer.Send(&wire.MsgCredit{Msgs: 1, Bytes: 1}))
		}, "through a ring"},
	}
	for _, tc := range frames {
		t.Run(tc.name, func(t *testing.T) {
			c, peer, _ := rawRingChan(t, tc.ring)
			tc.send(t, peer)
			select {
			case <-c.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the channel did not fail")
			}
			require.ErrorIs(t, c.Err(), gxerr.Peer)
			require.ErrorContains(t, c.Err(), tc.wantErr)
		})
	}
}

// sendRing sends a MsgRing granting a ring of size bytes (a memfd large
// enough).
func sendRing(t *testing.T, peer *wire.Conn, size uint64) {
	t.Helper()
	sendRingWindow(t, peer, 2, wire.MaxAppMsg, size)
}

// sendRingWindow sends a MsgRing granting a window of msgs messages of
// bytes bytes in all, in a ring of size bytes (a memfd large enough).
func sendRingWindow(t *testing.T, peer *wire.Conn, msgs uint32, bytes, size uint64) {
	t.Helper()
	sh, err := ipc.NewShared(int(ringHdr+size), "test-ring")
	require.NoError(t, err)
	defer sh.Close()
	require.NoError(t, peer.Send(&wire.MsgRing{Msgs: msgs, Bytes: bytes, Size: size}, sh.FD()))
}

// stalledRingChan starts a channel (its socket's write timeout wto) on a
// unix socket to a raw peer that takes the channel's ring grant, then
// reads no more: the socket is filled up, so that the channel's next
// write blocks. The peer grants the channel a ring (returned, as its
// consumer) and parks on it, so that the next message rings.
func stalledRingChan(t *testing.T, wto time.Duration) (*Chan, *wire.Conn, *rxRing) {
	t.Helper()
	env := &dptest.Env{} // no PeerTimeout: no heartbeats
	a, raw := unixConns(t)
	p := &fakePath{handle: func(wire.Message) (bool, error) { return false, nil }}
	c := New(Config{Env: env, Conn: wire.NewConn(a, wire.ConnConfig{WriteTimeout: wto}), Name: "raw", Peer: ringPeer, MsgRing: true, MsgWindow: 2, MsgWindowBytes: 1})
	p.c = c
	c.Start(p)
	peer := wire.NewConn(raw, wire.ConnConfig{})
	f, err := peer.Recv(context.Background())
	require.NoError(t, err)
	require.Equal(t, wire.TypeMsgRing, f.Header.Type)
	require.NoError(t, f.CloseFDs())
	// Fill the socket (the channel's writer is idle: nothing else writes).
	hb, err := wire.AppendFrame(nil, &wire.Heartbeat{})
	require.NoError(t, err)
	for i := 0; ; i++ {
		require.Less(t, i, 1<<20, "the socket never filled up")
		require.NoError(t, a.SetWriteDeadline(time.Now().Add(20*time.Millisecond)))
		if a.Send(hb, nil) != nil {
			break
		}
	}
	require.NoError(t, a.SetWriteDeadline(time.Time{}))
	size := ringSize(2, wire.MaxAppMsg)
	sh, err := ipc.NewShared(int(ringHdr+size), "test-ring")
	require.NoError(t, err)
	require.NoError(t, peer.Send(&wire.MsgRing{Msgs: 2, Bytes: wire.MaxAppMsg, Size: size}, sh.FD()))
	rx := &rxRing{ringMem: newRingMem(sh.Bytes(), size)}
	rx.flag(offRxWait).Store(1) // parked
	waitFor(t, "the channel to take the ring", c.MsgRing)
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		_ = peer.Close()
		_ = sh.Close()
		env.Wait()
	})
	return c, peer, rx
}

// TestRingBellNotSent: a message written into the peer's ring is sent,
// even when its bell cannot go out: Send returns nil (the peer takes the
// message, a retry would duplicate it). A bell lost to the write timeout
// fails the channel: the peer's parked Recv is woken by the failure and
// takes the messages left in its ring. A bell whose Send's ctx ended (no
// write timeout) goes out on the writer once the peer reads.
func TestRingBellNotSent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wto    time.Duration
		ctx    time.Duration // the Send's (0: none)
		failed bool          // the channel failed
	}{
		{"write timeout", 50 * time.Millisecond, 0, true},
		{"ctx ends", 0, 50 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer, rx := stalledRingChan(t, tc.wto)
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.ctx > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
			}
			defer cancel()
			sent := make(chan error, 1)
			go func() { sent <- c.SendMsg(ctx, []byte("ding"), nil) }()
			select {
			case err := <-sent:
				require.NoError(t, err, "the message is in the peer's ring")
			case <-time.After(5 * time.Second):
				t.Fatal("Send did not return")
			}
			m, ok, err := rx.pop()
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, []byte("ding"), m)
			require.Equal(t, MsgStats{Out: 1, OutBytes: 4, Bells: 1}, c.MsgStats())
			if tc.failed {
				require.ErrorIs(t, c.Err(), gxerr.Peer)
				return
			}
			require.NoError(t, c.Err())
			for { // the peer reads again: the bell comes after what filled the socket
				f, err := peer.Recv(context.Background())
				require.NoError(t, err)
				if f.Header.Type == wire.TypeMsgBell {
					break
				}
			}
			require.NoError(t, c.Err())
		})
	}
}
