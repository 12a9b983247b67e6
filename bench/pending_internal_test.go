package bench

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestServerSilentConnectionsBounded: connections that never say hello
// are held by the server (a goroutine and an fd each) for its hello wait
// at most (a minute here), but no more than maxPendingPerSource of them
// from one source and maxPending in all: beyond, the oldest of the
// source (at the total bound: of the source holding the most) is
// closed. A real client from another address is still served. Before
// the fix every one of them was held: a peer opening connections in a
// loop and saying nothing held thousands of fds and goroutines.
func TestServerSilentConnectionsBounded(t *testing.T) {
	const inAll, perSource = 64, 8 // maxPending, maxPendingPerSource
	for _, tc := range []struct {
		name    string
		sources int // silent peers at 127.0.0.2, 127.0.0.3, ...
		each    int // connections of each
	}{
		{"one source", 1, 300},
		{"many sources", 20, 2 * perSource},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := startRawServer(t, func(s *Server) { s.helloWait = time.Minute })
			addr := strings.TrimPrefix(srv.Addr(), "tcp:")
			var silent []net.Conn
			for i := range tc.sources {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}}
				for range tc.each {
					c, err := d.Dial("tcp", addr)
					require.NoError(t, err)
					t.Cleanup(func() { _ = c.Close() })
					silent = append(silent, c)
				}
			}

			// The server accepts in order: once the client is served,
			// every silent connection before it was accepted.
			eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, eng.Close()) })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, err := DialPeerTCP(ctx, eng, addr)
			require.NoError(t, err, "silent connections kept a client out")
			require.NoError(t, p.Close())

			srv.mu.Lock()
			held, by := len(srv.pending), map[string]int{}
			for ss := range srv.pending {
				host, _, err := net.SplitHostPort(ss.c.c.RemoteAddr().String())
				require.NoError(t, err)
				by[host]++
			}
			srv.mu.Unlock()
			require.LessOrEqual(t, held, inAll, "connections without hello held")
			for src, n := range by {
				require.LessOrEqual(t, n, perSource, "connections without hello held from %s", src)
			}
			// The first silent connection was closed by the server (its
			// EOF; the deadline only bounds the test).
			require.NoError(t, silent[0].SetReadDeadline(time.Now().Add(30*time.Second)))
			_, err = silent[0].Read(make([]byte, 1))
			require.ErrorIs(t, err, io.EOF, "the oldest silent connection is still held")
		})
	}
}
