package shm

import (
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// peerConn is the transport to a peer that does not read: a Send blocks
// until Close (stall), or fails at once as a write timeout does.
type peerConn struct {
	stall  bool
	mu     sync.Mutex
	sends  int
	closed chan struct{}
	once   sync.Once
}

func (p *peerConn) Send([]byte, []*fd.FD) error {
	p.mu.Lock()
	p.sends++
	p.mu.Unlock()
	if p.stall {
		<-p.closed
		return wire.ErrClosed
	}
	return os.ErrDeadlineExceeded
}

func (p *peerConn) Recv([]byte) (int, []*fd.FD, error) { <-p.closed; return 0, nil, io.EOF }
func (p *peerConn) Close() error                       { p.once.Do(func() { close(p.closed) }); return nil }

func (p *peerConn) sent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sends
}

// replyCtrl is an endpoint whose replies the test sees: those handed to
// the writer (QueueReply), and whether it failed. Serve is over its limit.
type replyCtrl struct {
	fakeCtrl
	conn   *wire.Conn
	qmu    sync.Mutex
	queued []wire.Message
}

func (c *replyCtrl) Conn() *wire.Conn               { return c.conn }
func (c *replyCtrl) MarkActive()                    {}
func (c *replyCtrl) PeerHello() *wire.Hello         { return &wire.Hello{} }
func (c *replyCtrl) Serve(func() wire.Message) bool { return false }
func (c *replyCtrl) Fail(err error)                 { c.fail(err) }
func (c *replyCtrl) SendErr(err error) error        { return c.PeerErr("send", err) }
func (c *replyCtrl) QueueReply(m wire.Message) error {
	c.qmu.Lock()
	c.queued = append(c.queued, m)
	c.qmu.Unlock()
	return nil
}

func (c *replyCtrl) replies() []wire.Message {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.queued
}

// lookupEnv answers every Lookup with mem (or st when it is not ok).
type lookupEnv struct {
	fakeEnv
	mem datapath.Mem
	st  wire.Status
}

func (e *lookupEnv) Lookup(*wire.RemoteKey, uint64, uint64, wire.KeyFlags) (datapath.Mem, wire.Status, string) {
	if e.st != wire.StatusOK {
		return datapath.Mem{}, e.st, "refused"
	}
	return e.mem, wire.StatusOK, ""
}

// sharedBuf is an exported host buffer: its memfd is what an import hands
// over.
type sharedBuf struct {
	*fakeBuf
	sh *ipc.Shared
}

func (b *sharedBuf) Shared() *ipc.Shared { return b.sh }

// TestServeRepliesOffTheReader: the path's Handle runs on the endpoint's
// reader, which never writes itself (datapath.Ctrl): the refusals of an
// ImportRequest and of a request over the serving limit go to the writer
// (QueueReply), so that a peer that does not read cannot block the reader
// on them (they were written inline, and dropped on a write timeout); an
// ImportReply, which carries descriptors and goes inline, that cannot be
// sent fails the endpoint instead of leaving the peer's import unanswered
// on an endpoint that looks up.
func TestServeRepliesOffTheReader(t *testing.T) {
	k := wire.RemoteKey{MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead | wire.KeyWrite, AllocID: 7, Length: 4096, GrantLen: 4096, Len: 4096}
	sh, err := ipc.NewShared(4096, "test-serve")
	require.NoError(t, err)
	defer sh.Close()
	for _, tc := range []struct {
		name   string
		st     wire.Status // the Lookup's
		stall  bool        // the peer's Send blocks (else it times out)
		m      wire.Message
		refuse uint64 // the request id refused through the writer (0: none)
		fails  bool   // the endpoint fails
	}{
		{"import refused", wire.StatusBadKey, true, &wire.ImportRequest{RequestID: 2, Key: k}, 2, false},
		{"over the serving limit", wire.StatusOK, true,
			&wire.Put{Request: wire.Request{RequestID: 4, Key: k, Length: 16, Local: wire.Local{Kind: wire.LocalKey, Key: k}}}, 4, false},
		{"import reply not sent", wire.StatusOK, false, &wire.ImportRequest{RequestID: 6, Key: k}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &lookupEnv{st: tc.st, mem: datapath.Mem{B: &sharedBuf{fakeBuf: &fakeBuf{id: 7}, sh: sh}, Len: 4096}}
			pc := &peerConn{stall: tc.stall, closed: make(chan struct{})}
			c := &replyCtrl{conn: wire.NewConn(pc, wire.ConnConfig{})}
			tr := New(env, Config{})
			defer tr.Close()
			dp, err := tr.Connect(t.Context(), c)
			require.NoError(t, err)
			p := dp.(*Path)
			done := make(chan error, 1)
			go func() {
				_, err := p.Handle(nil, tc.m)
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				_ = c.conn.Close()
				<-done
				t.Fatal("the reader blocked writing to a peer that does not read")
			}
			require.NoError(t, err)
			if tc.refuse != 0 {
				require.Zero(t, pc.sent(), "written on the reader")
				require.Len(t, c.replies(), 1)
				e, ok := c.replies()[0].(*wire.Error)
				require.True(t, ok, "%T", c.replies()[0])
				require.Equal(t, tc.refuse, e.RequestID)
			}
			if tc.fails {
				require.ErrorIs(t, c.Err(), gxerr.Peer)
			} else {
				require.NoError(t, c.Err())
			}
			_ = c.conn.Close()
			p.Failed(gxerr.Closed)
			env.wg.Wait()
		})
	}
}

// TestInvalidateStalledPeer: a buffer's importers are told it is freed
// each through its own endpoint's writer (QueueReply): a peer that does
// not read holds up neither Freeing nor the other importers' Invalidate
// (one goroutine wrote them in turn, each blocking up to the write
// timeout, and dropped those it could not write on endpoints left up).
func TestInvalidateStalledPeer(t *testing.T) {
	env := &fakeEnv{}
	tr := New(env, Config{})
	defer tr.Close()
	b := &fakeBuf{id: 5}
	require.NoError(t, b.Acquire())
	var ctrls []*replyCtrl
	for range 3 {
		pc := &peerConn{stall: true, closed: make(chan struct{})}
		c := &replyCtrl{conn: wire.NewConn(pc, wire.ConnConfig{})}
		dp, err := tr.Connect(t.Context(), c)
		require.NoError(t, err)
		_, err = dp.(*Path).lend(b, 9)
		require.NoError(t, err)
		ctrls = append(ctrls, c)
	}
	b.Release()
	b.freed.Store(true)
	tr.Revoke(b)
	require.NoError(t, tr.Freeing(b))
	for _, c := range ctrls {
		_ = c.conn.Close() // unblocks a send on the Freeing goroutine
	}
	env.wg.Wait()
	for i, c := range ctrls {
		require.Len(t, c.replies(), 1, "importer %d not told", i)
		require.Equal(t, &wire.Invalidate{AllocID: 5, Generation: 9}, c.replies()[0])
	}
}
