package shm

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// deadlineConn is the transport to a peer that does not read: a Send
// blocks until a write deadline in the past is set (what ends a write
// with its ctx, wire.Conn.SendCtx) or the connection closes.
type deadlineConn struct {
	peerConn
	entered chan struct{} // a Send is blocked
	kick    chan struct{}
}

func (d *deadlineConn) Send([]byte, []*fd.FD) error {
	d.entered <- struct{}{}
	select {
	case <-d.kick:
		return os.ErrDeadlineExceeded
	case <-d.closed:
		return wire.ErrClosed
	}
}

func (d *deadlineConn) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() && time.Now().After(t) {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// requestCtrl is an endpoint that registers the replies of requests.
type requestCtrl struct {
	replyCtrl
	pending map[uint64]func(wire.Frame, error)
}

func (c *requestCtrl) NewID() uint64 { return 3 }
func (c *requestCtrl) ExpectRequest(_ context.Context, id uint64, r datapath.Replier) error {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	c.pending[id] = r.Reply
	return nil
}

func (c *requestCtrl) Forget(id uint64) bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// exportEnv exports bounce buffers.
type exportEnv struct{ fakeEnv }

func (e *exportEnv) ExportKey(datapath.Buf) (wire.RemoteKey, error) {
	return wire.RemoteKey{MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead | wire.KeyWrite, Length: 16, GrantLen: 16, Len: 16}, nil
}

// TestRequestSendEndsWithCtx: a request the peer performs into a bounce
// buffer (a Put or Get on its Gaudi memory) that is being written to a
// peer that does not read ends with its ctx (ErrCanceled), as a message
// Send and a RoundTrip do: it waited for the write timeout whatever its
// ctx, holding one of the engine's transfer slots all along.
func TestRequestSendEndsWithCtx(t *testing.T) {
	env := &exportEnv{}
	dc := &deadlineConn{peerConn: peerConn{closed: make(chan struct{})}, entered: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
	c := &requestCtrl{replyCtrl: replyCtrl{conn: wire.NewConn(dc, wire.ConnConfig{})}, pending: map[uint64]func(wire.Frame, error){}}
	tr := New(env, Config{})
	defer tr.Close()
	dp, err := tr.Connect(t.Context(), c)
	require.NoError(t, err)
	p := dp.(*Path)
	k := wire.RemoteKey{MemType: wire.MemGaudi, Flags: wire.KeyRead | wire.KeyWrite, Length: 16, GrantLen: 16, Len: 16}
	r := &datapath.Req{Put: true, Key: k, Local: datapath.Mem{B: &fakeBuf{id: 1}, Len: 16}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := p.request(ctx, r, datapath.Mem{B: &fakeBuf{id: 2}, Len: 16})
		done <- err
	}()
	<-dc.entered // the request is being written
	cancel()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = c.conn.Close()
		<-done
		t.Fatal("the request's write did not end with its ctx")
	}
	require.ErrorIs(t, err, gxerr.Canceled)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, c.Forget(3), "the request is forgotten")
	require.NoError(t, c.Err(), "nothing went out: the endpoint stays up")
	_ = c.conn.Close()
}
