package engine

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/wire"
)

// fuzzPeerStream is msgs as a TCP peer sends them after the handshake:
// each frame behind its length, a Put or PutList followed by its data.
func fuzzPeerStream(t testing.TB, msgs ...wire.Message) []byte {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(c)
		_ = c.Close()
		got <- b
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	c := wire.NewConn(wire.NewStreamTransport(nc), wire.ConnConfig{MaxFrame: tcp.MaxFrame})
	for _, m := range msgs {
		var id, n uint64
		switch m := m.(type) {
		case *wire.Put:
			id, n = m.RequestID, m.Length
		case *wire.PutList:
			id = m.RequestID
			for _, e := range m.Entries {
				n += e.Length
			}
		}
		if n == 0 {
			require.NoError(t, c.Send(m))
			continue
		}
		require.NoError(t, c.SendWithData([]wire.Message{m}, id, 0, bytes.Repeat([]byte{0x5a}, int(n))))
	}
	require.NoError(t, c.Close())
	return <-got
}

// FuzzPeerStream: a TCP peer that completed the handshake sends the
// engine arbitrary bytes (requests on host and Gaudi memory with their
// data, lists, cancels, messages, garbage) and hangs up. Whatever it
// sent, the engine closes the connection, recovers no panic, and goes on
// serving another peer: a Put and a Get of that peer's own buffer
// complete with the right bytes.
func FuzzPeerStream(f *testing.F) {
	x := newPeerFuzzRig(f, "tcp", "127.0.0.1:0", WithTransport(TransportTCP))
	e, l, hk, dk, tk, ep, src, back := x.e, x.l, x.hk, x.dk, x.tk, x.ep, x.src, x.back

	req := func(id uint64, k RemoteKey, n uint64) wire.Request {
		return wire.Request{RequestID: id, Key: k.k, Length: n, Local: wire.Local{Kind: wire.LocalInline}}
	}
	lr := func(id uint64, k RemoteKey, lens ...uint64) wire.ListRequest {
		r := wire.ListRequest{RequestID: id, Keys: []wire.RemoteKey{k.k}}
		var off uint64
		for _, n := range lens {
			r.Entries = append(r.Entries, wire.ListEntry{Offset: off, Length: n})
			off += 2 * n
		}
		return r
	}
	f.Add([]byte{})
	f.Add(fuzzPeerStream(f, &wire.Put{Request: req(1, hk, 1000)}, &wire.Get{Request: req(3, hk.Slice(4096, 8192), 8192)}, &wire.Heartbeat{}))
	f.Add(fuzzPeerStream(f, &wire.Put{Request: req(1, dk, 4096)}, &wire.Get{Request: req(3, dk.Slice(1<<20, 2<<20), 2<<20)}))
	f.Add(fuzzPeerStream(f, &wire.PutList{ListRequest: lr(5, hk, 100, 0, 300)}, &wire.GetList{ListRequest: lr(7, dk, 200, 4096)}))
	f.Add(fuzzPeerStream(f, &wire.Get{Request: req(9, dk, 4<<20)}, &wire.Cancel{RequestID: 9}, &wire.AppMsg{Bytes: []byte("hi")}))
	f.Add(fuzzPeerStream(f, &wire.Invalidate{AllocID: 1, Generation: 1}, &wire.MsgCredit{Msgs: 1, Bytes: 1}, &wire.Bye{}))
	f.Add(fuzzPeerStream(f, &wire.Data{RequestID: 11, Offset: 5, Bytes: []byte("abc")}))

	hello := fakeHello()
	hello.Caps |= wire.CapCancel | wire.CapList | wire.CapMessages
	f.Fuzz(func(t *testing.T, stream []byte) {
		nc, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		c := wire.NewConn(wire.NewStreamTransport(nc), wire.ConnConfig{MaxFrame: tcp.MaxFrame})
		h := hello
		if err := c.Send(&h); err != nil {
			t.Fatal(err)
		}
		if fr, err := c.Recv(context.Background()); err != nil || fr.Header.Type != wire.TypeHelloAck {
			t.Fatalf("handshake: %v %v", fr.Header.Type, err)
		}
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			_, _ = nc.Write(stream) // the engine may hang up first
		}()
		// The peer hangs up once it wrote everything and the engine was
		// quiet for a moment (so that its requests are served first; the
		// pause only decides how far the engine gets, nothing is asserted
		// on it); then the engine must close the connection.
		buf := make([]byte, 64<<10)
		const quiet = 20 * time.Millisecond
		end := time.Now().Add(20 * time.Second)
		hungUp := false
		for {
			if hungUp {
				_ = nc.SetReadDeadline(end)
			} else {
				_ = nc.SetReadDeadline(time.Now().Add(quiet))
			}
			_, err := nc.Read(buf)
			if err == nil {
				continue
			}
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				break // the engine closed the connection
			}
			if time.Now().After(end) {
				t.Fatalf("the engine neither took the peer's bytes nor closed the connection (hung up: %v)", hungUp)
			}
			select {
			case <-wrote:
				if !hungUp {
					_ = nc.(*net.TCPConn).CloseWrite()
					hungUp = true
				}
			default:
			}
		}
		<-wrote
		if p := e.Stats().Panics; p != 0 {
			t.Fatalf("%d panics recovered", p)
		}
		// Another peer is served.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		fill(src.Bytes(), uint64(len(stream)))
		if err := ep.PutSync(ctx, src.All(), tk); err != nil {
			t.Fatalf("another peer's Put: %v", err)
		}
		if err := ep.GetSync(ctx, back.All(), tk); err != nil {
			t.Fatalf("another peer's Get: %v", err)
		}
		if !bytes.Equal(back.Bytes(), src.Bytes()) {
			t.Fatal("another peer's Get returned other bytes than its Put")
		}
	})
}

// peerFuzzRig is what the peer fuzz targets (FuzzPeerStream,
// FuzzPeerPackets) serve: an engine listening on network, a host and a
// Gaudi buffer of it with their keys, and another peer's endpoint with a
// buffer of the engine's (tk) and two of its own to Put and Get with.
type peerFuzzRig struct {
	e          *Engine
	l          *Listener
	hk, dk, tk RemoteKey
	ep         *Endpoint
	src, back  *Buffer
}

func newPeerFuzzRig(f *testing.F, network, addr string, opts ...DialOption) peerFuzzRig {
	var x peerFuzzRig
	x.e = newEngine(f, Config{Emulator: EmulatorConfig{DRAMSize: 128 << 20}})
	var err error
	x.l, err = x.e.Listen(network, addr)
	require.NoError(f, err)
	export := func(n int, loc Location) RemoteKey {
		b, err := x.e.Alloc(n, loc)
		require.NoError(f, err)
		k, err := b.Export()
		require.NoError(f, err)
		return k
	}
	x.hk, x.dk, x.tk = export(1<<20, Host), export(4<<20, Gaudi(0)), export(8192, Host)
	other := newEngine(f, Config{Devices: DevicesNone})
	x.ep, err = other.Dial(context.Background(), network, x.l.Addr(), opts...)
	require.NoError(f, err)
	f.Cleanup(func() { _ = x.ep.Close() })
	x.src, err = other.Alloc(8192, Host)
	require.NoError(f, err)
	x.back, err = other.Alloc(8192, Host)
	require.NoError(f, err)
	return x
}
