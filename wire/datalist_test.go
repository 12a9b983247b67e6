package wire

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// vecConn is a connection that writes a vector in one Write
// (BuffersWriter) and counts the calls.
type vecConn struct {
	net.Conn
	vec, writes atomic.Int32
}

func (c *vecConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func (c *vecConn) WriteBuffers(v *net.Buffers) (int64, error) {
	c.vec.Add(1)
	var b []byte
	for _, p := range *v {
		b = append(b, p...)
	}
	n, err := c.Conn.Write(b)
	return int64(n), err
}

// TestSendDataList: the frames of a list go out in one vectored write
// (behind the messages riding with them), each part at its offset, and
// land where the sink puts them, large payloads and small frames mixed
// (the reader's read-ahead shrinks after a large payload and grows back).
func TestSendDataList(t *testing.T) {
	t.Run("pipe", func(t *testing.T) { sendDataList(t, net.Pipe) })
	t.Run("tcp", func(t *testing.T) { // large payloads read with readv
		sendDataList(t, func() (net.Conn, net.Conn) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer l.Close()
			acc := make(chan net.Conn, 1)
			go func() {
				c, _ := l.Accept()
				acc <- c
			}()
			a, err := net.Dial("tcp", l.Addr().String())
			require.NoError(t, err)
			return a, <-acc
		})
	})
}

func sendDataList(t *testing.T, conns func() (net.Conn, net.Conn)) {
	a, b := conns()
	va := &vecConn{Conn: a}
	ca, cb := NewConn(NewStreamTransport(va), ConnConfig{}), NewConn(NewStreamTransport(b), ConnConfig{})
	t.Cleanup(func() {
		_ = ca.Close()
		_ = cb.Close()
	})
	big := bytes.Repeat([]byte("0123456789abcdef"), MaxDataPayload/16)
	parts := [][]byte{[]byte("x"), big[:40000], big[:70000], []byte("tail!"), big, big[:3]}
	var total int
	for _, p := range parts {
		total += len(p)
	}
	errc := make(chan error, 1)
	go func() {
		errc <- errors.Join(
			ca.SendDataList([]Message{&Completion{RequestID: 4}}, 7, 100, parts),
			ca.Send(&Heartbeat{}),
			ca.SendDataList(nil, 9, 0, parts[2:3]),
			ca.Send(&Bye{}),
		)
	}()
	dst := make([]byte, 100+total)
	one := make([]byte, 70000)
	var offs []uint64
	sink := func(id, off uint64, n int) ([]byte, error) {
		if id == 9 {
			return one[:n], nil
		}
		offs = append(offs, off)
		return dst[off : off+uint64(n)], nil
	}
	var types []Type
	for range 2 + len(parts) + 1 + 1 {
		f, err := cb.RecvRouted(context.Background(), sink)
		require.NoError(t, err)
		types = append(types, f.Header.Type)
	}
	require.NoError(t, <-errc)
	want := []Type{TypeCompletion}
	for range parts {
		want = append(want, TypeData)
	}
	require.Equal(t, append(want, TypeHeartbeat, TypeData, TypeBye), types)
	off := uint64(100)
	for i, p := range parts {
		require.Equal(t, off, offs[i], "part %d", i)
		require.Equal(t, p, dst[off:off+uint64(len(p))], "part %d", i)
		off += uint64(len(p))
	}
	require.Equal(t, parts[2], one)
	require.Equal(t, int32(2), va.vec.Load(), "each SendDataList was not one vectored write")

	for name, ps := range map[string][][]byte{"none": nil, "empty part": {[]byte("a"), {}}, "too large": {make([]byte, MaxDataPayload+1)}} {
		require.ErrorIs(t, ca.SendDataList(nil, 1, 0, ps), ErrInvalid, name)
	}
}
