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
	pa, pb := &fakePath{}, &fakePath{}
	cfg := func(c *ipc.Conn, name string, dialer bool) Config {
		return Config{Env: env, Conn: wire.NewConn(c, wire.ConnConfig{}), Name: name, Dialer: dialer, Peer: ringPeer,
			MsgRing: true, MsgWindow: window, MsgWindowBytes: windowBytes}
	}
	a, b = New(cfg(ca, "b", true)), New(cfg(cb, "a", false))
	pa.c, pb.c = a, b
	a.Start(pa)
	b.Start(pb)
	t.Cleanup(func() {
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
		env.Wait()
	})
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
