package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// startRawServer starts a perf server over tcp on 127.0.0.1 with its own
// engine; Cleanup stops it.
func startRawServer(t *testing.T, tune ...func(*Server)) (*Server, *engine.Engine) {
	t.Helper()
	srvEng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	srv, err := Listen(srvEng, ServerConfig{TCP: "127.0.0.1:0"})
	require.NoError(t, err)
	for _, f := range tune {
		f(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, srvEng.Close())
	})
	return srv, srvEng
}

// rawHello is a hello of this control version, from pid 1.
var rawHello = fmt.Sprintf(`{"op":"hello","version":%d,"pid":1}`, ctlVersion)

// rawCtl is a hand-driven control connection.
type rawCtl struct {
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, srv *Server) *rawCtl {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.Addr(), "tcp:"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &rawCtl{c: c, r: bufio.NewReader(c)}
}

// call sends line and returns the reply (nil: the server closed the
// connection).
func (r *rawCtl) call(t *testing.T, line string) *ctlMsg {
	t.Helper()
	require.NoError(t, r.c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := r.c.Write([]byte(line + "\n"))
	require.NoError(t, err)
	b, err := r.r.ReadBytes('\n')
	if err != nil {
		return nil
	}
	var m ctlMsg
	require.NoError(t, json.Unmarshal(b, &m))
	return &m
}

// TestServerRequestsBeforeHello: a client that has not said hello (no
// version check, over tcp no pid) is refused whatever it asks, and the
// session ends.
func TestServerRequestsBeforeHello(t *testing.T) {
	for _, line := range []string{
		`{"op":"alloc","mem":"host","size":64}`,
		`{"op":"attach"}`,
		`{"op":"verify","buf":1}`,
		`{"op":"pingpong_end"}`,
		`{"op":"bye"}`,
	} {
		t.Run(line, func(t *testing.T) {
			srv, _ := startRawServer(t)
			c := dialRaw(t, srv)
			r := c.call(t, line)
			require.NotNil(t, r)
			require.Contains(t, r.Error, "hello first")
			require.Nil(t, c.call(t, rawHello), "the session is over")
		})
	}
}

// requireServed fails unless a Peer is served by srv within 10 s.
func requireServed(t *testing.T, srv *Server, msg string) {
	t.Helper()
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	require.Eventually(t, func() bool {
		p, err := DialPeerTCP(context.Background(), eng, strings.TrimPrefix(srv.Addr(), "tcp:"))
		if err != nil {
			return false
		}
		return p.Close() == nil
	}, 10*time.Second, 50*time.Millisecond, msg)
}

// TestServerSilentClient: a client that connects and never says hello
// does not hold the server (the next client is served), and it is dropped
// after the server's helloWait.
func TestServerSilentClient(t *testing.T) {
	srv, _ := startRawServer(t, func(s *Server) { s.helloWait = 200 * time.Millisecond })
	silent := dialRaw(t, srv) // connects, never says a word
	requireServed(t, srv, "the silent client still holds the server")
	require.NoError(t, silent.c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := silent.r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the silent client was dropped")
}

// TestServerSilentConnectionDoesNotHold: a connection that has not said
// hello does not hold the server (one client at a time): a real client
// is served at once while it stays open and silent, over tcp and ipc,
// and the silent one is then refused as busy when it says hello. Its
// hello wait is a minute here, so that the client cannot have been served
// because the silent connection timed out. Before the fix the connection
// took the server at connect: the real client was refused ("busy with
// client at ...") for up to the hello wait, and a peer reconnecting in
// a loop kept every client out.
func TestServerSilentConnectionDoesNotHold(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			srvEng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
			require.NoError(t, err)
			defer srvEng.Close()
			cfg := ServerConfig{TCP: "127.0.0.1:0"}
			if network == "unix" {
				cfg = ServerConfig{Path: filepath.Join(t.TempDir(), "s.sock")}
			}
			srv, err := Listen(srvEng, cfg)
			require.NoError(t, err)
			srv.helloWait = time.Minute
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx) }()
			defer func() {
				cancel()
				require.NoError(t, <-done)
			}()

			addr := strings.TrimPrefix(srv.Addr(), "tcp:")
			if network == "unix" {
				addr = cfg.Path + CtlSuffix
			}
			sc, err := net.Dial(network, addr)
			require.NoError(t, err)
			defer sc.Close()
			silent := &rawCtl{c: sc, r: bufio.NewReader(sc)}

			eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
			require.NoError(t, err)
			defer eng.Close()
			var p *Peer
			if network == "unix" {
				p, err = DialPeer(ctx, eng, cfg.Path)
			} else {
				p, err = DialPeerTCP(ctx, eng, addr)
			}
			require.NoError(t, err, "a silent connection held the server")
			r := silent.call(t, rawHello)
			require.NotNil(t, r, "the silent connection was dropped before its hello wait")
			require.Contains(t, r.Error, "busy with client pid")
			require.NoError(t, p.Close())
		})
	}
}

// TestServerIdleClient: a client that said hello, then stopped without
// closing its connection (killed without a FIN, suspended, cut off), does
// not hold the server for good: the session ends after the server's
// idleWait, and the next client is served. One that pings in time is kept.
func TestServerIdleClient(t *testing.T) {
	srv, _ := startRawServer(t, func(s *Server) { s.idleWait = 300 * time.Millisecond })
	pinging := dialRaw(t, srv)
	require.Empty(t, pinging.call(t, rawHello).Error)
	for range 6 { // 900 ms in all, three idle limits
		time.Sleep(150 * time.Millisecond)
		r := pinging.call(t, `{"op":"ping"}`)
		require.NotNil(t, r, "a client that pings in time is kept")
		require.Empty(t, r.Error)
	}
	require.Empty(t, pinging.call(t, `{"op":"bye"}`).Error)

	// A server of its own: the one above frees itself only after the bye.
	srv, _ = startRawServer(t, func(s *Server) { s.idleWait = 300 * time.Millisecond })
	idle := dialRaw(t, srv)
	require.Empty(t, idle.call(t, rawHello).Error)
	requireServed(t, srv, "the idle client still holds the server")
	require.Nil(t, idle.call(t, `{"op":"ping"}`), "the idle client was dropped")
}

// TestPeerKeepalive: a Peer that measures for longer than the server's
// idle limit without a control request keeps its session: it pings.
func TestPeerKeepalive(t *testing.T) {
	srv, _ := startRawServer(t, func(s *Server) { s.idleWait = 400 * time.Millisecond })
	saved := keepaliveEvery
	keepaliveEvery = 100 * time.Millisecond
	t.Cleanup(func() { keepaliveEvery = saved })
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	p, err := DialPeerTCP(context.Background(), eng, strings.TrimPrefix(srv.Addr(), "tcp:"))
	require.NoError(t, err)
	time.Sleep(1200 * time.Millisecond) // three idle limits without a request
	id, _, err := p.alloc(context.Background(), Host, 64, 1, false)
	require.NoError(t, err, "the session outlived the server's idle limit")
	require.NoError(t, p.free(context.Background(), id))
	require.NoError(t, p.Close())
}

// TestServerCapsBuffers: one client cannot have the server allocate
// buffers without bound (each host buffer is a memfd and its memory).
func TestServerCapsBuffers(t *testing.T) {
	srv, _ := startRawServer(t)
	c := dialRaw(t, srv)
	require.Empty(t, c.call(t, rawHello).Error)
	n := 0
	for ; n < 1000; n++ {
		r := c.call(t, `{"op":"alloc","mem":"host","size":1}`)
		require.NotNil(t, r)
		if r.Error != "" {
			require.Contains(t, r.Error, "too many buffers")
			break
		}
	}
	require.Equal(t, 64, n, "buffers allocated before the refusal")
	// Freeing one makes room for one.
	require.Empty(t, c.call(t, `{"op":"free","buf":1}`).Error)
	require.Empty(t, c.call(t, `{"op":"alloc","mem":"host","size":1}`).Error)
	require.NotEmpty(t, c.call(t, `{"op":"alloc","mem":"host","size":1}`).Error)
}

// TestServerCapsBufferBytes: nor buffers of more than the server's maxBytes in
// all.
func TestServerCapsBufferBytes(t *testing.T) {
	srv, _ := startRawServer(t, func(s *Server) { s.maxBytes = 1000 })
	c := dialRaw(t, srv)
	require.Empty(t, c.call(t, rawHello).Error)
	for _, tc := range []struct {
		req, refused string
	}{
		{`{"op":"alloc","mem":"host","size":600}`, ""},
		{`{"op":"alloc","mem":"host","size":401}`, "would exceed"},
		{`{"op":"alloc","mem":"host","size":400}`, ""},
		{`{"op":"alloc","mem":"host","size":1}`, "would exceed"},
		{`{"op":"free","buf":1}`, ""},
		{`{"op":"alloc","mem":"host","size":600}`, ""},
	} {
		r := c.call(t, tc.req)
		require.NotNil(t, r, tc.req)
		if tc.refused == "" {
			require.Empty(t, r.Error, tc.req)
		} else {
			require.Contains(t, r.Error, tc.refused, tc.req)
		}
	}
}

// TestServerAttachClosesStrayEndpoints: endpoints another process opened
// to the server's engine, passed over while a session looks for its
// client's, are closed, not left open.
func TestServerAttachClosesStrayEndpoints(t *testing.T) {
	srvEng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer srvEng.Close()
	srv, err := Listen(srvEng, ServerConfig{TCP: "127.0.0.1:0"})
	require.NoError(t, err)
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	sc, err := l.Accept()
	require.NoError(t, err)
	defer sc.Close()
	ss := &session{s: srv, c: newCtlConn(sc, "client"), pid: -1} // no endpoint is ours

	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	stray, err := eng.Dial(context.Background(), "tcp", srv.EngineAddr())
	require.NoError(t, err)
	defer stray.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = ss.accept(ctx)
	require.ErrorContains(t, err, "no engine endpoint")
	select {
	case <-stray.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the stray endpoint the server passed over is still open")
	}
}
