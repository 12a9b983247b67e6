package ctrlchan

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/wire"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// fakePath serves Puts by answering a Completion through the writer's
// queue (as the TCP path does) and records what the channel calls.
type fakePath struct {
	c                    *Chan
	ticks, failed, ended atomic.Int32
	handle               func(m wire.Message) (bool, error) // nil: answer Puts
}

func (p *fakePath) Kind() datapath.Kind                                     { return datapath.KindPipe }
func (p *fakePath) Start(context.Context, datapath.Req, datapath.Completer) {}
func (p *fakePath) Sink() wire.DataSink                                     { return nil }
func (p *fakePath) Landed()                                                 {}
func (p *fakePath) Tick()                                                   { p.ticks.Add(1) }
func (p *fakePath) Failed(error)                                            { p.failed.Add(1) }
func (p *fakePath) Closed(error)                                            { p.ended.Add(1) }
func (p *fakePath) Stats(*datapath.Stats)                                   {}
func (p *fakePath) Bind(context.Context, datapath.Mem, wire.RemoteKey, *wire.RemoteKey, time.Time) (datapath.Bound, error) {
	return nil, gxerr.NotSupported
}

func (p *fakePath) Handle(_ *wire.Frame, m wire.Message) (bool, error) {
	if p.handle != nil {
		return p.handle(m)
	}
	if put, ok := m.(*wire.Put); ok {
		p.c.MarkActive()
		return true, p.c.QueueReply(&wire.Completion{RequestID: put.RequestID})
	}
	return false, nil
}

// req is a request for 16 bytes of a host buffer.
func req(id uint64, local wire.LocalKind) wire.Request {
	k := wire.RemoteKey{MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead | wire.KeyWrite, Length: 16, Len: 16, GrantLen: 16}
	return wire.Request{RequestID: id, Key: k, Length: 16, Local: wire.Local{Kind: local}}
}

// newChan starts a channel on one end of an in-memory connection and
// returns the other end, raw.
func newChan(t *testing.T, env *dptest.Env, dialer bool, p *fakePath) (*Chan, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	cfg := wire.ConnConfig{ReadTimeout: env.Cfg.PeerTimeout}
	c := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(a), cfg), Name: "peer", Dialer: dialer})
	p.c = c
	c.Start(p)
	return c, b
}

// startPair starts channels a and b with a fake path each, closed (and
// env waited for) when the test ends.
func startPair(t *testing.T, env *dptest.Env, a, b *Chan) (pa, pb *fakePath) {
	pa, pb = &fakePath{c: a}, &fakePath{c: b}
	a.Start(pa)
	b.Start(pb)
	t.Cleanup(func() {
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
		env.Wait()
	})
	return pa, pb
}

// pair connects two channels.
func pair(t *testing.T, env *dptest.Env) (a, b *Chan, pa, pb *fakePath) {
	t.Helper()
	ca, cb := net.Pipe()
	cfg := wire.ConnConfig{ReadTimeout: env.Cfg.PeerTimeout}
	a = New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(ca), cfg), Name: "b", Dialer: true})
	b = New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(cb), cfg), Name: "a"})
	pa, pb = startPair(t, env, a, b)
	return a, b, pa, pb
}

// TestRoundTrip: ids have each side's parity; a request is answered
// through the peer's reply queue; the peer is marked active.
func TestRoundTrip(t *testing.T) {
	a, b, _, _ := pair(t, &dptest.Env{})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		ida, idb := a.NewID(), b.NewID()
		require.True(t, a.Ours(ida) && !a.Ours(idb) && b.Ours(idb) && !b.Ours(ida), "ids %d %d", ida, idb)
		require.Equal(t, uint64(1), ida&1)
		for _, c := range []struct {
			from *Chan
			id   uint64
		}{{a, ida}, {b, idb}} {
			f, err := c.from.RoundTrip(ctx, c.id, &wire.Put{Request: req(c.id, wire.LocalInline)})
			require.NoError(t, err)
			require.NoError(t, c.from.ReplyErr(f))
			require.Equal(t, c.id, f.Header.RequestID)
		}
	}
	require.True(t, a.TakeActivity() && b.TakeActivity())
	require.False(t, a.TakeActivity() || b.TakeActivity(), "taken")
	require.True(t, a.Dialer() && !b.Dialer())
}

// TestRoundTripCanceled: a round trip whose ctx ends returns ctx's error
// and forgets its id (a late reply is dropped); a failed channel refuses
// round trips.
func TestRoundTripCanceled(t *testing.T) {
	p := &fakePath{handle: func(m wire.Message) (bool, error) { return true, nil }} // never answers
	env := &dptest.Env{}
	c, raw := newChan(t, env, true, p)
	peer := wire.NewConn(wire.NewStreamTransport(raw), wire.ConnConfig{})
	got := make(chan wire.Frame, 1)
	go func() {
		f, err := peer.Recv(context.Background())
		if err == nil {
			got <- f
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	id := c.NewID()
	_, err := c.RoundTrip(ctx, id, &wire.Get{Request: req(id, wire.LocalInline)})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	<-got
	require.False(t, c.Forget(id), "the id is forgotten")
	require.NoError(t, peer.Send(&wire.Completion{RequestID: id})) // late: dropped
	require.NoError(t, c.Expect(id+2, func(wire.Frame, error) {}))
	require.True(t, c.Forget(id+2))
	require.NoError(t, c.Close())
	_, err = c.RoundTrip(context.Background(), c.NewID(), &wire.Heartbeat{})
	require.ErrorIs(t, err, gxerr.Closed)
	require.ErrorIs(t, c.Expect(99, nil), gxerr.Closed)
	_ = peer.Close()
	env.Wait()
}

// TestRoundTripSendFailure: a round trip whose request cannot be sent
// because the channel failed meanwhile (its write blocked on a peer that
// does not read) returns the channel's error, as SendMsg and the paths'
// sends (SendErr) do: gxerr.Closed when this side closed it, a peer
// error when the peer went.
func TestRoundTripSendFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(c *Chan, raw net.Conn) error
		want error
	}{
		{"closed", func(c *Chan, _ net.Conn) error { return c.Close() }, gxerr.Closed},
		{"peer hung up", func(_ *Chan, raw net.Conn) error { return raw.Close() }, gxerr.Peer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &dptest.Env{}
			c, raw := newChan(t, env, true, &fakePath{}) // raw is never read: the request's write blocks
			id := c.NewID()
			errc := make(chan error, 1)
			go func() {
				_, err := c.RoundTrip(context.Background(), id, &wire.Get{Request: req(id, wire.LocalInline)})
				errc <- err
			}()
			waitFor(t, "the request to be registered", func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				_, ok := c.pending[id]
				return ok
			})
			require.NoError(t, tc.end(c, raw))
			select {
			case err := <-errc:
				require.ErrorIs(t, err, tc.want)
				if tc.want != gxerr.Peer {
					require.NotErrorIs(t, err, gxerr.Peer)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("RoundTrip did not return")
			}
			require.NoError(t, c.Close())
			_ = raw.Close()
			env.Wait()
		})
	}
}

// TestHeartbeats: two idle channels with a PeerTimeout stay up (each
// heartbeats, and ticks its path); a peer that stays silent fails the
// channel with a peer error wrapping gxerr.Timeout.
func TestHeartbeats(t *testing.T) {
	env := &dptest.Env{Cfg: datapath.Config{PeerTimeout: 200 * time.Millisecond}}
	a, b, pa, _ := pair(t, env)
	time.Sleep(600 * time.Millisecond)
	require.NoError(t, a.Err())
	require.NoError(t, b.Err())
	require.NotZero(t, pa.ticks.Load())

	c, raw := newChan(t, env, true, &fakePath{})
	go func() { // read what c sends (heartbeats), never answer
		buf := make([]byte, 4096)
		for {
			if _, err := raw.Read(buf); err != nil {
				return
			}
		}
	}()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a silent peer did not fail the channel")
	}
	require.ErrorIs(t, c.Err(), gxerr.Peer)
	require.ErrorIs(t, c.Err(), gxerr.Timeout)
	require.NoError(t, c.Close())
	_ = raw.Close()
}

// TestPeerFaults: what the peer sends that fails the channel, each with
// a peer error, the path told once and pending replies failed.
func TestPeerFaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		send []wire.Message
		raw  []byte
		msg  string
	}{
		{"garbage", nil, []byte("not a frame at all, not even close to one"), "malformed frame"},
		{"put no path serves", []wire.Message{&wire.Put{Request: req(2, wire.LocalRDMA)}}, nil, "malformed frame"},
		{"data without a sink", []wire.Message{&wire.Data{RequestID: 9, Bytes: []byte("x")}}, nil, "malformed frame"},
		{"bye", []wire.Message{&wire.Bye{}}, nil, "peer closed the endpoint"},
		{"hang up", nil, nil, "connection lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &dptest.Env{}
			p := &fakePath{handle: func(wire.Message) (bool, error) { return false, nil }}
			c, raw := newChan(t, env, false, p)
			var got error
			var wg sync.WaitGroup
			wg.Add(1)
			require.NoError(t, c.Expect(1, func(_ wire.Frame, err error) { got = err; wg.Done() }))
			peer := wire.NewConn(wire.NewStreamTransport(raw), wire.ConnConfig{})
			go func() {
				for _, m := range tc.send {
					if err := peer.Send(m); err != nil {
						_ = peer.Close() // fails the test instead of hanging it
					}
				}
				if tc.raw != nil {
					_, _ = raw.Write(tc.raw)
				}
				if tc.send == nil && tc.raw == nil {
					_ = peer.Close()
				}
			}()
			<-c.Done()
			wg.Wait()
			require.ErrorIs(t, got, gxerr.Peer)
			require.ErrorIs(t, c.Err(), gxerr.Peer)
			require.Contains(t, c.Err().Error(), tc.msg)
			require.NoError(t, c.Close())
			require.NoError(t, c.Close(), "idempotent")
			require.Equal(t, int32(1), p.failed.Load())
			require.Equal(t, int32(1), p.ended.Load())
			_ = peer.Close()
			env.Wait()
		})
	}
}

// TestReplyQueueBound: a peer that does not read its replies fails once
// MaxReplies are queued; TakeReplies empties the queue.
func TestReplyQueueBound(t *testing.T) {
	c := New(Config{Env: &dptest.Env{}, Conn: wire.NewConn(nopTransport{}, wire.ConnConfig{}), MaxReplies: 3})
	for i := 0; i < 3; i++ {
		require.NoError(t, c.QueueReply(&wire.Heartbeat{}))
	}
	require.Error(t, c.QueueReply(&wire.Heartbeat{}))
	require.Len(t, c.TakeReplies(), 3)
	require.Nil(t, c.TakeReplies())
	require.NoError(t, c.QueueReply(&wire.Heartbeat{}))
}

// TestServeLimit: at most MaxServing requests run at once, MaxServing
// more wait in the backlog and run as slots free (a requester counts a
// request it cancels out at once, while here it winds down: without the
// backlog its next requests were refused, in tcp "too many requests in
// progress", ErrPeer), and only a request beyond both is refused. Close
// waits for those running and those waiting.
func TestServeLimit(t *testing.T) {
	env := &dptest.Env{}
	c, raw := newChan(t, env, true, &fakePath{})
	release := make(chan struct{})
	var ended, running, most atomic.Int32
	blocked := func() wire.Message {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		running.Add(-1)
		ended.Add(1)
		return nil
	}
	for i := 0; i < 2*MaxServing; i++ {
		require.True(t, c.Serve(blocked), "request %d: in progress or in the backlog", i)
	}
	require.False(t, c.Serve(func() wire.Message { return nil }), "over the limit and the backlog")
	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	go func() { _, _ = raw.Read(make([]byte, 64)) }() // the Bye
	select {
	case <-closed:
		t.Fatal("Close returned while requests were being served")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	<-closed
	require.Equal(t, int32(2*MaxServing), ended.Load(), "the backlog's requests ran too")
	require.LessOrEqual(t, most.Load(), int32(MaxServing), "at most MaxServing at once")
	_ = raw.Close()
	env.Wait()
}

// TestErrors: how replies and refusals map to error kinds.
func TestErrors(t *testing.T) {
	c := New(Config{Env: &dptest.Env{}, Conn: wire.NewConn(nopTransport{}, wire.ConnConfig{}), Name: "peer \"x\""})
	frame := func(m wire.Message) wire.Frame {
		var tr capture
		require.NoError(t, wire.NewConn(&tr, wire.ConnConfig{}).Send(m))
		f, err := wire.NewConn(&tr, wire.ConnConfig{}).Recv(context.Background())
		require.NoError(t, err)
		return f
	}
	require.NoError(t, c.ReplyErr(frame(&wire.Completion{RequestID: 1})))
	require.ErrorIs(t, c.ReplyErr(frame(&wire.Completion{RequestID: 1, Status: wire.StatusNoResources})), gxerr.Peer)
	require.ErrorIs(t, c.ReplyErr(frame(wire.NewError(1, wire.StatusBadKey, "no"))), gxerr.Invalid)
	require.ErrorIs(t, c.ReplyErr(frame(wire.NewError(1, wire.StatusNoResources, "busy"))), gxerr.Peer)
	require.ErrorIs(t, c.ReplyErr(frame(&wire.Heartbeat{})), gxerr.Peer)
	require.Contains(t, c.PeerErr("x", nil).Error(), "peer \"x\"")
	require.ErrorIs(t, c.SendErr(errors.New("reset")), gxerr.Peer)
	require.ErrorIs(t, c.SendErr(gxerr.Closed), gxerr.Closed)
	require.NoError(t, c.SendErr(nil))
}

// nopTransport accepts every frame and receives none.
type nopTransport struct{}

func (nopTransport) Send([]byte, []*fd.FD) error        { return nil }
func (nopTransport) Recv([]byte) (int, []*fd.FD, error) { return 0, nil, errors.New("nothing") }
func (nopTransport) Close() error                       { return nil }

// capture keeps the frames sent and receives them back, in order.
type capture struct{ frames [][]byte }

func (c *capture) Send(b []byte, _ []*fd.FD) error {
	c.frames = append(c.frames, append([]byte(nil), b...))
	return nil
}

func (c *capture) Recv(buf []byte) (int, []*fd.FD, error) {
	if len(c.frames) == 0 {
		return 0, nil, errors.New("empty")
	}
	n := copy(buf, c.frames[0])
	c.frames = c.frames[1:]
	return n, nil, nil
}

func (c *capture) Close() error { return nil }

// TestRequestSlots: ExpectRequest waits while MaxServing requests are
// outstanding (until ctx ends), a Forget gives a slot back, and a failure
// gives back them all and wakes the waiters.
func TestRequestSlots(t *testing.T) {
	env := &dptest.Env{}
	c, raw := newChan(t, env, true, &fakePath{})
	go func() { _, _ = io.Copy(io.Discard, raw) }()
	failed := make(chan error, MaxServing+1)
	var first uint64
	for i := 0; i < MaxServing; i++ {
		id := c.NewID()
		if i == 0 {
			first = id
		}
		require.NoError(t, c.ExpectRequest(context.Background(), id, datapath.ReplyFunc(func(_ wire.Frame, err error) { failed <- err })))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.ExpectRequest(ctx, c.NewID(), datapath.ReplyFunc(func(wire.Frame, error) {}))
	require.ErrorIs(t, err, context.DeadlineExceeded, "no slot while MaxServing are outstanding")

	// A Forget gives its slot back.
	require.True(t, c.Forget(first))
	require.NoError(t, c.ExpectRequest(context.Background(), c.NewID(), datapath.ReplyFunc(func(_ wire.Frame, err error) { failed <- err })))

	// A waiter is woken by the failure.
	waited := make(chan error, 1)
	go func() {
		waited <- c.ExpectRequest(context.Background(), c.NewID(), datapath.ReplyFunc(func(wire.Frame, error) {}))
	}()
	require.NoError(t, c.Close())
	require.Error(t, <-waited)
	for i := 0; i < MaxServing; i++ {
		require.Error(t, <-failed)
	}
	require.Empty(t, c.slots, "every slot given back")
	_ = raw.Close()
	env.Wait()
}

// TestReplyNotSentFailsChannel: a reply that cannot be sent (the peer
// does not read it within the write timeout; part of it may have gone
// out, which breaks the stream) fails the channel, so that the peer's
// requests end with an error and the endpoint is not left up with its
// replies lost.
func TestReplyNotSentFailsChannel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(c *Chan)
	}{
		{"served", func(c *Chan) { require.True(t, c.Serve(func() wire.Message { return &wire.Completion{RequestID: 2} })) }},
		{"queued", func(c *Chan) { require.NoError(t, c.QueueReply(&wire.Completion{RequestID: 2})) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &dptest.Env{} // no PeerTimeout: no heartbeats, no read timeout
			a, raw := net.Pipe() // raw is never read
			c := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(a), wire.ConnConfig{WriteTimeout: 50 * time.Millisecond}), Name: "peer"})
			p := &fakePath{c: c}
			c.Start(p)
			tc.reply(c)
			require.Eventually(t, func() bool { return c.Err() != nil }, 5*time.Second, time.Millisecond, "the channel failed")
			require.ErrorIs(t, c.Err(), gxerr.Peer)
			require.NoError(t, c.Close())
			_ = raw.Close()
			env.Wait()
		})
	}
}

// TestRoundTripReplyKept: the reply frame RoundTrip returns keeps its
// payload after the reader has read the next frame into the connection's
// buffer (a Replier's frame aliases it: RoundTrip copies it).
func TestRoundTripReplyKept(t *testing.T) {
	a, _, _, pb := pair(t, &dptest.Env{})
	ctx := context.Background()
	id1, id2 := a.NewID(), a.NewID()
	second := make(chan error, 1)
	require.NoError(t, a.ExpectRequest(ctx, id2, datapath.ReplyFunc(func(f wire.Frame, err error) {
		if err == nil {
			err = a.ReplyErr(f)
		}
		second <- err
	})))
	pb.handle = func(m wire.Message) (bool, error) {
		if put, ok := m.(*wire.Put); ok && put.RequestID == id1 {
			// The second reply is read after the first, into the same buffer.
			if err := pb.c.QueueReply(wire.NewError(id1, wire.StatusRefused, "the first reply")); err != nil {
				return true, err
			}
			return true, pb.c.QueueReply(wire.NewError(id2, wire.StatusRefused, "THE SECOND REPLY, LONGER"))
		}
		return false, nil
	}
	f, err := a.RoundTrip(ctx, id1, &wire.Put{Request: req(id1, wire.LocalInline)})
	require.NoError(t, err)
	require.ErrorContains(t, <-second, "THE SECOND REPLY")
	err = a.ReplyErr(f)
	require.ErrorContains(t, err, "the first reply")
}
