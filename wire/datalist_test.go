package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// TestSendDataV: the parts of a frame go out in one vectored write
// (behind the messages riding with it) as one Data frame, which a
// DataSinkV lands in pieces cut elsewhere than the parts (and a plain
// DataSink in one place); large payloads and small frames mixed (the
// reader's read-ahead shrinks after a large payload and grows back).
func TestSendDataV(t *testing.T) {
	t.Run("pipe", func(t *testing.T) { sendDataV(t, net.Pipe) })
	t.Run("tcp", func(t *testing.T) { // large payloads read with readv
		sendDataV(t, func() (net.Conn, net.Conn) { return tcpPair(t) })
	})
}

// tcpPair is both ends of a TCP connection over loopback.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
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
}

func sendDataV(t *testing.T, conns func() (net.Conn, net.Conn)) {
	a, b := conns()
	va := &vecConn{Conn: a}
	ca, cb := NewConn(NewStreamTransport(va), ConnConfig{}), NewConn(NewStreamTransport(b), ConnConfig{})
	t.Cleanup(func() {
		_ = ca.Close()
		_ = cb.Close()
	})
	big := bytes.Repeat([]byte("0123456789abcdef"), MaxDataPayload/16)
	frames := [][][]byte{
		{[]byte("x"), big[:40000], {}, big[:70000], []byte("tail!")},
		{big[:MaxDataPayload-3], big[:3]},
		{big[:100]},
		{big[5:200005]},
	}
	errc := make(chan error, 1)
	go func() {
		var errs []error
		for i, parts := range frames {
			var msgs []Message
			if i == 0 {
				msgs = []Message{&Completion{RequestID: 4}}
			}
			errs = append(errs, ca.SendDataV(msgs, uint64(i+1), 1000, parts))
			if i == 1 {
				errs = append(errs, ca.Send(&Heartbeat{}))
			}
		}
		errc <- errors.Join(append(errs, ca.Send(&Bye{}))...)
	}()
	// Frame 1 lands in three pieces of its own cutting, the others in one
	// place each (frame 3 by the plain sink).
	want := make([][]byte, len(frames))
	got := make([][]byte, len(frames))
	for i, parts := range frames {
		want[i] = bytes.Join(parts, nil)
		got[i] = make([]byte, len(want[i]))
	}
	cb.SetDataSinkV(func(id, off uint64, n int, into [][]byte) ([][]byte, error) {
		if off != 1000 || n != len(got[id-1]) {
			return nil, errors.New("bad frame")
		}
		g := got[id-1]
		if id == 1 {
			return append(into, g[:7], g[7:50000], g[50000:]), nil
		}
		return append(into, g), nil
	})
	var types []Type
	for range 1 + len(frames) + 2 {
		f, err := cb.RecvRouted(context.Background(), func(uint64, uint64, int) ([]byte, error) {
			return nil, errors.New("the plain sink is not used once a DataSinkV is set")
		})
		require.NoError(t, err)
		types = append(types, f.Header.Type)
	}
	require.NoError(t, <-errc)
	require.Equal(t, []Type{TypeCompletion, TypeData, TypeData, TypeHeartbeat, TypeData, TypeData, TypeBye}, types)
	require.Equal(t, want, got)
	require.Equal(t, int32(len(frames)), va.vec.Load(), "each SendDataV was not one vectored write")

	for name, ps := range map[string][][]byte{"none": nil, "empty parts": {{}, {}}, "too large": {big, []byte("1")}} {
		require.ErrorIs(t, ca.SendDataV(nil, 1, 0, ps), ErrInvalid, name)
	}
}

// TestRoutedManyPieces: a Data frame a DataSinkV cuts into more pieces
// than one readv takes (IOV_MAX, 1024 on Linux) lands whole: a list's
// frame may span that many small entries.
func TestRoutedManyPieces(t *testing.T) {
	a, b := tcpPair(t)
	ca, cb := NewConn(NewStreamTransport(a), ConnConfig{}), NewConn(NewStreamTransport(b), ConnConfig{})
	t.Cleanup(func() {
		_ = ca.Close()
		_ = cb.Close()
	})
	for _, pieces := range []int{1023, 1024, 1025, 3000, 8000, 30000} {
		const piece = 32
		want := bytes.Repeat([]byte("0123456789abcdef"), pieces*piece/16)
		errc := make(chan error, 1)
		go func() { errc <- errors.Join(ca.SendData(7, 0, want), ca.Send(&Heartbeat{})) }()
		got := make([]byte, len(want))
		cb.SetDataSinkV(func(id, off uint64, n int, into [][]byte) ([][]byte, error) {
			for k := 0; k < n; k += piece {
				into = append(into, got[k:k+piece])
			}
			return into, nil
		})
		for _, typ := range []Type{TypeData, TypeHeartbeat} {
			f, err := cb.RecvRouted(context.Background(), nil)
			require.NoError(t, err, "%d pieces", pieces)
			require.Equal(t, typ, f.Header.Type)
		}
		require.NoError(t, <-errc)
		require.Equal(t, want, got, "%d pieces", pieces)
	}
}

// TestDataVAllocations: a Data frame of many parts sent with SendDataV
// and read into as many pieces by a DataSinkV, over TCP, allocates
// nothing once the connection is warm (the iovecs of both ends' system
// calls are kept; a list of a thousand entries is sent so in 64 frames).
func TestDataVAllocations(t *testing.T) {
	a, b := tcpPair(t)
	ca, cb := NewConn(NewStreamTransport(a), ConnConfig{}), NewConn(NewStreamTransport(b), ConnConfig{})
	t.Cleanup(func() {
		_ = ca.Close()
		_ = cb.Close()
	})
	const parts, piece = 32, 2048 // 64 KiB: read with readv, not through the read-ahead
	src, dst := make([]byte, parts*piece), make([]byte, parts*piece)
	for i := range src {
		src[i] = byte(i % 251)
	}
	out := make([][]byte, parts)
	for i := range out {
		out[i] = src[i*piece : (i+1)*piece]
	}
	cb.SetDataSinkV(func(_, _ uint64, n int, into [][]byte) ([][]byte, error) {
		for i := range parts { // the pieces in reverse order
			j := parts - 1 - i
			into = append(into, dst[j*piece:(j+1)*piece])
		}
		return into, nil
	})
	ctx := context.Background()
	frame := func() {
		if err := ca.SendDataV(nil, 1, 0, out); err != nil {
			panic(err)
		}
		if _, err := cb.RecvRouted(ctx, nil); err != nil {
			panic(err)
		}
	}
	frame()
	allocs := testing.AllocsPerRun(50, frame)
	for i := range parts {
		require.Equal(t, out[i], dst[(parts-1-i)*piece:(parts-i)*piece], "piece %d", i)
	}
	require.Zero(t, allocs, "allocations per frame")
}

// TestLargeFrameAllocations: a frame whose payload is read straight into
// the receive buffer (readPayload: one readv that also takes the next
// frame's head) allocates nothing once the connection is warm.
func TestLargeFrameAllocations(t *testing.T) {
	a, b := tcpPair(t)
	ca, cb := NewConn(NewStreamTransport(a), ConnConfig{}), NewConn(NewStreamTransport(b), ConnConfig{MaxFrame: 1 << 20})
	t.Cleanup(func() {
		_ = ca.Close()
		_ = cb.Close()
	})
	p := make([]byte, 512<<10) // past the read-ahead: read with readPayload
	ctx := context.Background()
	frame := func() {
		if err := ca.SendData(1, 0, p); err != nil {
			panic(err)
		}
		f, err := cb.Recv(ctx)
		if err != nil || f.Header.Type != TypeData {
			panic(fmt.Sprint(f.Header.Type, err))
		}
	}
	frame()
	require.Zero(t, testing.AllocsPerRun(50, frame), "allocations per frame")
}
