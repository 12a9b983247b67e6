package bench

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// bytesConn is a net.Conn that reads the given bytes and discards what
// is written.
type bytesConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *bytesConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *bytesConn) Close() error                     { return nil }
func (c *bytesConn) SetDeadline(time.Time) error      { return nil }
func (c *bytesConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bytesConn) SetWriteDeadline(time.Time) error { return nil }
func (c *bytesConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// FuzzCtlRecv feeds a perf server peer-controlled bytes: the control
// channel's reader must return each line as a message or an error (never
// panic, never a message from a line over ctlMaxLine), and the server's
// handling of whatever it decodes must not panic and must stay within
// the session's buffer limits.
func FuzzCtlRecv(f *testing.F) {
	for _, s := range []string{
		rawHello + "\n" + `{"op":"alloc","mem":"host","size":64,"seed":3}` + "\n" + `{"op":"verify","buf":1,"seed":3,"has_seq":true,"seq_off":-9223372036854775808}` + "\n",
		`{"op":"alloc","mem":"gaudi","size":1}` + "\n" + `{"op":"free","buf":1}` + "\n" + `{"op":"free","buf":1}` + "\n",
		`{"op":"pingpong","buf":1,"size":8,"key":"AAAA"}` + "\n" + `{"op":"pingpong_end","seq":1}` + "\n",
		`{"op":"bye"}`,
		`{"op":`,
		"\n\n[1,2]\nnull\n\"x\"\n",
		`{"size":1e400}` + "\n",
		strings.Repeat("x", 300) + "\n",
	} {
		f.Add([]byte(s))
	}
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(f, err)
	f.Cleanup(func() { _ = eng.Close() })
	srv, err := Listen(eng, ServerConfig{TCP: "127.0.0.1:0"}) // not served: handle is called directly
	require.NoError(f, err)
	srv.maxBytes = 1 << 20 // no fuzz input allocates more
	f.Cleanup(func() { _ = srv.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		c := newCtlConn(&bytesConn{r: bytes.NewReader(data)}, "fuzz")
		ss := &session{s: srv, c: c, who: "fuzz", bufs: map[uint64]*srvBuf{}}
		defer func() { require.NoError(t, ss.cleanup()) }()
		for range 64 {
			m, err := c.recv(time.Second)
			if err != nil {
				return
			}
			if m.Op == opAttach {
				continue // waits for an engine endpoint
			}
			r := ss.handle(context.Background(), m)
			require.NotNil(t, r)
			require.LessOrEqual(t, len(ss.bufs), maxSessionBufs)
			require.LessOrEqual(t, ss.bytes, srv.maxBytes)
		}
	})
}

// TestCtlRecvLongLine: a line longer than ctlMaxLine is an error, not a
// message, and is not read to its end.
func TestCtlRecvLongLine(t *testing.T) {
	for _, tc := range []struct {
		n   int
		err string
	}{
		{ctlMaxLine - 1, ""},
		{ctlMaxLine + 1, "longer than"},
		{4 * ctlMaxLine, "longer than"},
	} {
		line := `{"op":"` + strings.Repeat("x", tc.n-len(`{"op":""}`)-1) + `"}` + "\n"
		r := bytes.NewReader([]byte(line))
		m, err := newCtlConn(&bytesConn{r: r}, "test").recv(time.Second)
		if tc.err == "" {
			require.NoError(t, err, tc.n)
			require.Len(t, m.Op, tc.n-len(`{"op":""}`)-1)
			continue
		}
		require.ErrorContains(t, err, tc.err, tc.n)
		require.LessOrEqual(t, len(line)-r.Len(), ctlMaxLine+4096, "read past the limit")
	}
}
