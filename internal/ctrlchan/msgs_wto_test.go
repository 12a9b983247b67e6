package ctrlchan

import (
	"context"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// stuckPeer is the transport (of whole frames) to a peer that takes the
// channel's first frame, its grant, then reads no more: a later Send
// fails at its write deadline, nothing of it sent. Recv returns the
// frames the test hands it.
type stuckPeer struct {
	mu       sync.Mutex
	sent     int
	deadline time.Time
	in       chan []byte
	closed   chan struct{}
	once     sync.Once
}

func (s *stuckPeer) Send([]byte, []*fd.FD) error {
	s.mu.Lock()
	s.sent++
	first, d := s.sent == 1, s.deadline
	s.mu.Unlock()
	if first {
		return nil
	}
	var expired <-chan time.Time
	if !d.IsZero() {
		t := time.NewTimer(time.Until(d))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-expired:
		return os.ErrDeadlineExceeded
	case <-s.closed:
		return wire.ErrClosed
	}
}

func (s *stuckPeer) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	s.deadline = t
	s.mu.Unlock()
	return nil
}

func (s *stuckPeer) Recv(buf []byte) (int, []*fd.FD, error) {
	select {
	case b := <-s.in:
		return copy(buf, b), nil, nil
	case <-s.closed:
		return 0, nil, io.EOF
	}
}

func (s *stuckPeer) Close() error { s.once.Do(func() { close(s.closed) }); return nil }

// TestMsgSendWriteTimeout: a message the peer does not take within the
// write timeout (nothing of it went out) fails the channel, as a reply or
// a heartbeat that cannot be sent does. It was refused with ErrPeer on a
// channel left up, its credit spent: the peer, which never got it, never
// returns that credit, so each such Send shrank the window for good
// until Sends waited for ever on a peer reading again.
func TestMsgSendWriteTimeout(t *testing.T) {
	env := &dptest.Env{} // no PeerTimeout: no heartbeats
	tr := &stuckPeer{in: make(chan []byte, 1), closed: make(chan struct{})}
	p := &fakePath{handle: func(wire.Message) (bool, error) { return false, nil }}
	c := New(Config{Env: env, Conn: wire.NewConn(tr, wire.ConnConfig{WriteTimeout: 50 * time.Millisecond}), Name: "raw", Peer: msgPeer})
	p.c = c
	c.Start(p)
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		env.Wait()
	})
	credit, err := wire.AppendFrame(nil, &wire.MsgCredit{Msgs: 4, Bytes: 1 << 20})
	require.NoError(t, err)
	tr.in <- credit
	waitFor(t, "the credit", func() bool { n, _ := c.MsgCredit(); return n == 4 })

	err = c.SendMsg(context.Background(), []byte("not taken"), nil)
	require.ErrorIs(t, err, gxerr.Peer)
	require.ErrorIs(t, c.Err(), gxerr.Peer, "the channel failed")
	require.Zero(t, c.MsgStats().Out)
}
