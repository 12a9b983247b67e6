package engine

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/wire"
)

func TestTCPPutGetEveryPair(t *testing.T) {
	p := startPeerAt(t, "tcp", "127.0.0.1:0")
	e := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	ep, err := e.Dial(context.Background(), "tcp", p.path, WithTransport(TransportTCP))
	require.NoError(t, err)
	require.Equal(t, TransportTCP, ep.Transport())
	require.Contains(t, ep.Peer(), "127.0.0.1")
	putGetEveryPair(t, e, ep, p)
	st := ep.Stats()
	require.Equal(t, TransportTCP, st.Transport)
	require.NotZero(t, st.BytesOut)
	require.NotZero(t, st.BytesIn)
	require.NoError(t, ep.Close())
}

// fakePeer speaks the protocol by hand over TCP, to send what a real
// engine never would.
type fakePeer struct {
	c  *wire.Conn
	nc net.Conn // under c: for bytes that are not frames
}

func fakeHello() wire.Hello {
	h := wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion,
		Caps: wire.CapInlineData | wire.CapHeartbeat, PID: 1, Name: "fake"}
	h.EngineID[0] = 0xfa
	return h
}

// dialFake connects to an engine's TCP listener and completes the
// handshake (the fake is the dialer: its request ids are odd).
func dialFake(t *testing.T, addr string) *fakePeer {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	c := wire.NewConn(wire.NewStreamTransport(nc), wire.ConnConfig{MaxFrame: tcp.MaxFrame})
	t.Cleanup(func() { _ = c.Close() })
	h := fakeHello()
	require.NoError(t, c.Send(&h))
	f, err := c.Recv(context.Background())
	require.NoError(t, err)
	require.Equal(t, wire.TypeHelloAck, f.Header.Type)
	return &fakePeer{c: c, nc: nc}
}

// closedByPeer reads until the engine closes the connection.
func (p *fakePeer) closedByPeer(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, err := p.c.Recv(ctx); err != nil {
			require.NotErrorIs(t, err, context.DeadlineExceeded, "the engine kept the connection open")
			return
		}
	}
}

func TestTCPMalformedFrames(t *testing.T) {
	e := newEngine(t, Config{})
	l, err := e.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	buf, _ := e.Alloc(1<<20, Host)
	key, err := buf.Export()
	require.NoError(t, err)
	put := func(id, n uint64, kind wire.LocalKind) *wire.Put {
		return &wire.Put{Request: wire.Request{RequestID: id, Key: key.k, Length: n, Local: wire.Local{Kind: kind, Key: key.k}}}
	}
	tests := []struct {
		name string
		send func(c *wire.Conn) error
	}{
		{"garbage", func(c *wire.Conn) error {
			return c.Transport().Send([]byte("this is not a frame at all, not even close"), nil)
		}},
		{"data for a request never made", func(c *wire.Conn) error { return c.SendData(7, 0, []byte("x")) }},
		{"data for a request id of the engine's parity", func(c *wire.Conn) error { return c.SendData(1<<40, 0, []byte("x")) }},
		{"data out of order", func(c *wire.Conn) error {
			return errors.Join(c.Send(put(3, 4096, wire.LocalInline)), c.SendData(3, 100, []byte("x")))
		}},
		{"data beyond the request", func(c *wire.Conn) error {
			return c.SendWithData([]wire.Message{put(3, 2, wire.LocalInline)}, 3, 0, []byte("xyz"))
		}},
		{"put of the engine's parity", func(c *wire.Conn) error { return c.Send(put(4, 8, wire.LocalInline)) }},
		{"put by shared key over tcp", func(c *wire.Conn) error { return c.Send(put(5, 8, wire.LocalKey)) }},
		{"import request over tcp", func(c *wire.Conn) error {
			return c.Send(&wire.ImportRequest{RequestID: 5, Key: key.k})
		}},
		{"control frame too large", func(c *wire.Conn) error {
			fr := wire.Header{Version: wire.Version, Type: wire.TypeError, Length: tcp.MaxFrame, RequestID: 1}.Append(nil)
			return c.Transport().Send(append(fr, make([]byte, tcp.MaxFrame)...), nil)
		}},
	}
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := dialFake(t, l.Addr())
			require.NoError(t, tc.send(p.c))
			p.closedByPeer(t)
			// The engine goes on serving: a real peer puts and gets.
			e2 := newEngine(t, Config{Devices: DevicesNone})
			ep, err := e2.Dial(ctx, "tcp", l.Addr(), WithTransport(TransportTCP))
			require.NoError(t, err)
			h, _ := e2.Alloc(4096, Host)
			fill(h.Bytes(), 9)
			require.NoError(t, ep.PutSync(ctx, h.All(), key.Slice(0, 4096)))
			require.Equal(t, h.Bytes(), buf.Bytes()[:4096])
			require.NoError(t, ep.Close())
		})
	}
	// A refused Put (edited key) is answered, its bytes dropped, and the
	// connection stays in step.
	p := dialFake(t, l.Addr())
	bad := put(9, 8, wire.LocalInline)
	bad.Key.Length++ // no longer verifies
	require.NoError(t, p.c.SendWithData([]wire.Message{bad}, 9, 0, []byte("12345678")))
	f, err := p.c.Recv(ctx)
	require.NoError(t, err)
	m, err := f.Message()
	require.NoError(t, err)
	require.Equal(t, wire.StatusBadKey, m.(*wire.Error).Code)
	require.NoError(t, p.c.SendWithData([]wire.Message{put(11, 8, wire.LocalInline)}, 11, 0, []byte("abcdefgh")))
	f, err = p.c.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, wire.TypeCompletion, f.Header.Type)
	require.Equal(t, []byte("abcdefgh"), buf.Bytes()[:8])
}

// TestTCPMalformedFromListener: the side that dials gets garbage from the
// peer it reached; its endpoint fails with ErrPeer and its operations end.
func TestTCPMalformedFromListener(t *testing.T) {
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer nl.Close()
	go func() {
		nc, err := nl.Accept()
		if err != nil {
			return
		}
		c := wire.NewConn(wire.NewStreamTransport(nc), wire.ConnConfig{MaxFrame: tcp.MaxFrame})
		defer c.Close()
		f, err := c.Recv(context.Background())
		if err != nil {
			return
		}
		var h wire.Hello
		if f.Decode(&h) != nil {
			return
		}
		ack, err := wire.Negotiate(fakeHello(), h)
		if err != nil {
			return
		}
		_ = c.Send(&ack)
		_ = c.SendData(2, 0, []byte("unasked")) // data for a Get never made
		_, _ = c.Recv(context.Background())     // until the engine hangs up
	}()
	e := newEngine(t, Config{})
	ep, err := e.Dial(context.Background(), "tcp", nl.Addr().String(), WithTransport(TransportTCP))
	require.NoError(t, err)
	<-ep.Done()
	require.ErrorIs(t, ep.Err(), ErrPeer)
	require.Contains(t, ep.Err().Error(), "malformed")
}

// TestTCPBackpressure: a receiver whose device is slow slows the sender;
// neither side buffers more than its staging pool and the sockets hold.
func TestTCPBackpressure(t *testing.T) {
	const total = 128 << 20
	recv := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 1 << 30}})
	send := newEngine(t, Config{Devices: DevicesNone})
	l, err := recv.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dst, err := recv.Alloc(total, Gaudi(0))
	require.NoError(t, err)
	key, err := dst.Export()
	require.NoError(t, err)
	ctx := context.Background()
	ep, err := send.Dial(ctx, "tcp", l.Addr(), WithTransport(TransportTCP))
	require.NoError(t, err)
	src, _ := send.Alloc(total, Host)
	fill(src.Bytes(), 3)

	recv.cp.Devs[0].Sim.DelayNextCS(1000, 3*time.Second)
	f := ep.Put(ctx, src.All(), key)
	time.Sleep(1500 * time.Millisecond)
	// What can be out of the sender: the receiver's staging buffers, the
	// chunk being read, and what the two sockets' buffers hold at most.
	bound := uint64(tcp.StageBuffers+2)*tcp.Chunk + sysctlMax(t, "tcp_rmem") + sysctlMax(t, "tcp_wmem")
	sent := ep.Stats().BytesOut
	t.Logf("sent %d MiB of %d MiB while the receiver's device stalled (bound %d MiB)", sent>>20, total>>20, bound>>20)
	require.LessOrEqual(t, sent, bound)
	require.False(t, f.IsDone())
	recv.cp.Devs[0].Sim.DelayNextCS(0, 0)
	require.NoError(t, f.Wait(ctx))
	back, _ := recv.Alloc(total, Host)
	require.NoError(t, recv.CopySync(ctx, back.All(), dst.All()))
	require.True(t, bytes.Equal(src.Bytes(), back.Bytes()))
}

func sysctlMax(t *testing.T, name string) uint64 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
	require.NoError(t, err)
	f := strings.Fields(string(b))
	v, err := strconv.ParseUint(f[len(f)-1], 10, 64)
	require.NoError(t, err)
	return v
}

func TestTCPLanes(t *testing.T) {
	owner := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
	user := newEngine(t, Config{TCPLanes: 3, Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx := context.Background()
	ep, err := user.Dial(ctx, "tcp", l.Addr(), WithTransport(TransportTCP))
	require.NoError(t, err)
	require.Equal(t, 3, ep.Stats().Lanes)
	acc, err := l.Accept(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, acc.Stats().Lanes)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = l.Accept(short)
	require.ErrorIs(t, err, context.DeadlineExceeded, "lanes are not handed to Accept")

	const size = 16<<20 + 3
	src, _ := user.Alloc(size, Host)
	fill(src.Bytes(), 11)
	back, _ := user.Alloc(size, Host)
	for _, loc := range []Location{Host, Gaudi(0)} {
		remote, err := owner.Alloc(size, loc)
		require.NoError(t, err)
		rk, err := remote.Export()
		require.NoError(t, err)
		for _, n := range []int{4 << 20, size} { // the smallest transfer split over the lanes, and more
			mid, _ := user.Alloc(n, Gaudi(0))
			require.NoError(t, ep.PutSync(ctx, src.Slice(0, n), rk.Slice(0, n)), "%v %d", loc, n)
			require.NoError(t, ep.GetSync(ctx, mid.All(), rk.Slice(0, n)), "%v %d", loc, n)
			clear(back.Bytes())
			require.NoError(t, user.CopySync(ctx, back.Slice(0, n), mid.All()))
			require.True(t, bytes.Equal(src.Bytes()[:n], back.Bytes()[:n]), "%v %d: data differs", loc, n)
			require.NoError(t, mid.Free())
		}
	}
	lanes := tcp.Lanes(ep.path)
	require.Len(t, lanes, 2)
	own := ep.Stats().BytesOut
	for i, lane := range lanes {
		n := user.endpointOf(lane).Stats().BytesOut
		require.NotZero(t, n, "lane %d carried no data", i+1)
		own -= n
	}
	require.NotZero(t, own, "the endpoint's own connection carried no data")
	// A lane that fails fails its endpoint, and the endpoint its lanes.
	_ = lanes[1].Conn().Close()
	<-ep.Done()
	require.ErrorIs(t, ep.Err(), ErrPeer)
	<-lanes[0].Done()
	require.ErrorIs(t, ep.PutSync(ctx, src.Slice(0, 8), key8(t, owner)), ErrPeer)
	require.NoError(t, ep.Close())
}

// TestTCPLanesSpreadSmall: transfers too small to split go to the
// connection with the fewest requests in progress: one at a time they
// all take the endpoint's own connection, many at once spread over the
// lanes too.
func TestTCPLanesSpreadSmall(t *testing.T) {
	owner := newEngine(t, Config{Devices: DevicesNone})
	user := newEngine(t, Config{Devices: DevicesNone, TCPLanes: 3})
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	ctx := context.Background()
	ep, err := user.Dial(ctx, "tcp", l.Addr(), WithTransport(TransportTCP))
	require.NoError(t, err)
	defer ep.Close()
	lanes := tcp.Lanes(ep.path)
	require.Len(t, lanes, 2)
	laneBytes := func() (n uint64) {
		for _, lane := range lanes {
			n += user.endpointOf(lane).Stats().BytesOut
		}
		return n
	}
	const n, each = 200, 64 << 10
	src, _ := user.Alloc(n*each, Host)
	fill(src.Bytes(), 5)
	dst, _ := owner.Alloc(n*each, Host)
	rk, err := dst.Export()
	require.NoError(t, err)
	for i := range 20 { // one at a time
		require.NoError(t, ep.PutSync(ctx, src.Slice(i*each, each), rk.Slice(i*each, each)))
	}
	require.Zero(t, laneBytes(), "a lone small request took a lane")
	fs := make([]*Future, n)
	for i := range n { // all at once
		fs[i] = ep.Put(ctx, src.Slice(i*each, each), rk.Slice(i*each, each))
	}
	for _, f := range fs {
		require.NoError(t, f.Wait(ctx))
	}
	require.True(t, bytes.Equal(src.Bytes(), dst.Bytes()))
	for i, lane := range lanes {
		require.NotZero(t, user.endpointOf(lane).Stats().BytesOut, "lane %d carried none of %d concurrent Puts", i+1, n)
	}
}

// endpointOf is the endpoint whose control channel is c.
func (e *Engine) endpointOf(c datapath.Ctrl) *Endpoint {
	e.epMu.Lock()
	defer e.epMu.Unlock()
	for ep := range e.endpoints {
		if ep.ch == c {
			return ep
		}
	}
	return nil
}

func key8(t *testing.T, e *Engine) RemoteKey {
	b, _ := e.Alloc(8, Host)
	k, err := b.Export()
	require.NoError(t, err)
	return k
}

// TestTCPManyStagedTransfers: more Gaudi-to-wire transfers at once than
// staging buffers (the owner serving Gets from its Gaudi memory, and Puts
// from local Gaudi memory) all complete: a sender never holds a staging
// buffer while it waits for another.
func TestTCPManyStagedTransfers(t *testing.T) {
	owner := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	user := newEngine(t, Config{TCPLanes: 1, Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx := context.Background()
	ep, err := user.Dial(ctx, "tcp", l.Addr(), WithTransport(TransportTCP))
	require.NoError(t, err)
	const n, part = 32, 3<<20 + 5
	src, _ := owner.Alloc(n*part, Host)
	fill(src.Bytes(), 21)
	dev, _ := owner.Alloc(n*part, Gaudi(0))
	require.NoError(t, owner.CopySync(ctx, dev.All(), src.All()))
	rk, err := dev.Export()
	require.NoError(t, err)
	got, _ := user.Alloc(n*part, Host)
	var futs []*Future
	for i := range n {
		futs = append(futs, ep.Get(ctx, got.Slice(i*part, part), rk.Slice(i*part, part)))
	}
	for _, f := range futs {
		require.NoError(t, f.Wait(ctx))
	}
	require.True(t, bytes.Equal(src.Bytes(), got.Bytes()))

	local, _ := user.Alloc(n*part, Gaudi(0))
	require.NoError(t, user.CopySync(ctx, local.All(), got.All()))
	hb, _ := owner.Alloc(n*part, Host)
	hk, err := hb.Export()
	require.NoError(t, err)
	futs = futs[:0]
	for i := range n {
		futs = append(futs, ep.Put(ctx, local.Slice(i*part, part), hk.Slice(i*part, part)))
	}
	for _, f := range futs {
		require.NoError(t, f.Wait(ctx))
	}
	require.True(t, bytes.Equal(src.Bytes(), hb.Bytes()))
}

// TestTCPCompletionBeforeData: an owner that completes a Get without
// sending its bytes fails the endpoint (the Get does not wait forever).
func TestTCPCompletionBeforeData(t *testing.T) {
	owner := newEngine(t, Config{Devices: DevicesNone})
	b, _ := owner.Alloc(4096, Host)
	key, err := b.Export()
	require.NoError(t, err)
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer nl.Close()
	go func() {
		nc, err := nl.Accept()
		if err != nil {
			return
		}
		c := wire.NewConn(wire.NewStreamTransport(nc), wire.ConnConfig{MaxFrame: tcp.MaxFrame})
		defer c.Close()
		f, err := c.Recv(context.Background())
		if err != nil {
			return
		}
		var h wire.Hello
		if f.Decode(&h) != nil {
			return
		}
		hello := fakeHello()
		hello.EngineID = owner.ident.hello.EngineID // the key's owner
		ack, err := wire.Negotiate(hello, h)
		if err != nil {
			return
		}
		_ = c.Send(&ack)
		for {
			f, err := c.Recv(context.Background())
			if err != nil {
				return
			}
			if f.Header.Type == wire.TypeGet {
				_ = c.Send(&wire.Completion{RequestID: f.Header.RequestID, Status: wire.StatusOK})
			}
		}
	}()
	e := newEngine(t, Config{Devices: DevicesNone, TCPLanes: 1})
	ctx := context.Background()
	ep, err := e.Dial(ctx, "tcp", nl.Addr().String(), WithTransport(TransportTCP))
	require.NoError(t, err)
	h, _ := e.Alloc(4096, Host)
	err = ep.GetSync(ctx, h.All(), key)
	require.ErrorIs(t, err, ErrPeer)
	require.Contains(t, err.Error(), "before all its data")
	<-ep.Done()
}
