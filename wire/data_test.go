package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRoutedData sends Data frames (alone and behind a request, small and
// large) between control frames and checks that each payload lands where
// the sink put it, that nil drops it, and that control frames still arrive
// whole and in order.
func TestRoutedData(t *testing.T) {
	ca, cb := pipeConns(t, ConnConfig{MaxFrame: 4096})
	big := bytes.Repeat([]byte("0123456789abcdef"), MaxDataPayload/16)
	small := []byte("eight by")
	put := &Put{Request{RequestID: 9, Key: testKey(), Length: uint64(len(small)), Local: Local{Kind: LocalInline}}}
	errc := make(chan error, 1)
	go func() {
		errc <- errors.Join(
			ca.SendData(1, 0, small),
			ca.Send(&Heartbeat{}),
			ca.SendData(2, 4096, big),
			ca.SendWithData([]Message{&Completion{RequestID: 4}, put}, 9, 0, small),
			ca.SendData(3, 0, big[:1000]), // dropped by the sink
			ca.Send(&Bye{}),
		)
	}()
	dst := map[uint64][]byte{1: make([]byte, len(small)), 2: make([]byte, len(big)), 9: make([]byte, len(small))}
	var got []string
	sink := func(id, off uint64, n int) ([]byte, error) {
		got = append(got, "data")
		if id == 3 {
			return nil, nil
		}
		if id == 2 && off != 4096 {
			return nil, errors.New("bad offset")
		}
		return dst[id][:n], nil
	}
	for range 8 {
		f, err := cb.RecvRouted(context.Background(), sink)
		require.NoError(t, err)
		if f.Routed {
			require.Equal(t, TypeData, f.Header.Type)
			continue
		}
		got = append(got, f.Header.Type.String())
		if f.Header.Type == TypePut {
			m, err := f.Message()
			require.NoError(t, err)
			require.Equal(t, put, m)
		}
	}
	require.NoError(t, <-errc)
	require.Equal(t, []string{"data", "Heartbeat", "data", "Completion", "Put", "data", "data", "Bye"}, got)
	require.Equal(t, small, dst[1])
	require.Equal(t, big, dst[2])
	require.Equal(t, small, dst[9])
}

func TestRoutedDataErrors(t *testing.T) {
	dataFrame := func(mut func(h *Header, p []byte) []byte) []byte {
		h := Header{Version: Version, Type: TypeData, RequestID: 1}
		p := append(binary.LittleEndian.AppendUint64(nil, 0), "abcdefgh"...)
		if mut != nil {
			p = mut(&h, p)
		}
		if h.Length == 0 {
			h.Length = uint32(len(p))
		}
		fr := append(h.Append(nil), p...)
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(fr))), fr...)
	}
	tests := []struct {
		name   string
		stream []byte
		sink   DataSink
		want   error
	}{
		{"sink refuses", dataFrame(nil), func(uint64, uint64, int) ([]byte, error) { return nil, errors.New("unknown request") }, nil},
		{"sink returns the wrong size", dataFrame(nil), func(uint64, uint64, int) ([]byte, error) { return make([]byte, 3), nil }, nil},
		{"fds on data", dataFrame(func(h *Header, p []byte) []byte { h.NumFDs = 1; return p }), nil, ErrMalformed},
		{"length disagrees with the prefix", dataFrame(func(h *Header, p []byte) []byte { h.Length = 99; return p }), nil, ErrMalformed},
		{"bad magic", func() []byte { b := dataFrame(nil); b[4] ^= 1; return b }(), nil, ErrMalformed},
		{"data frame beyond the limit", func() []byte {
			b := dataFrame(nil)
			binary.LittleEndian.PutUint32(b, dataHeadSize+MaxDataPayload+1)
			binary.LittleEndian.PutUint32(b[4+8:], 8+MaxDataPayload+1)
			return b
		}(), nil, ErrTooLarge},
		{"control frame beyond the buffer", func() []byte {
			return binary.LittleEndian.AppendUint32(Header{Version: Version, Type: TypeBye}.Append(nil), 0)[:0]
		}(), nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.stream) == 0 {
				// A 5000-byte non-Data frame into a 4096-byte buffer.
				fr := rawFrame(Header{Type: TypeError, RequestID: 1}, make([]byte, 5000))
				tc.stream = append(binary.LittleEndian.AppendUint32(nil, uint32(len(fr))), fr...)
				tc.want = ErrTooLarge
			}
			a, b := net.Pipe()
			c := NewConn(NewStreamTransport(b), ConnConfig{MaxFrame: 4096})
			defer c.Close()
			defer a.Close()
			go func() { _, _ = a.Write(tc.stream) }()
			sink := tc.sink
			if sink == nil {
				sink = func(_, _ uint64, n int) ([]byte, error) { return make([]byte, n), nil }
			}
			_, err := c.RecvRouted(context.Background(), sink)
			require.Error(t, err)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
			}
			// The stream is out of step: every later receive fails too.
			_, err2 := c.RecvRouted(context.Background(), sink)
			require.Error(t, err2)
		})
	}
}

func TestSendDataChecks(t *testing.T) {
	ca, _ := pipeConns(t, ConnConfig{})
	require.ErrorIs(t, ca.SendData(1, 0, nil), ErrInvalid)
	require.ErrorIs(t, ca.SendData(1, 0, make([]byte, MaxDataPayload+1)), ErrInvalid)
	reply := &ImportReply{RequestID: 5, AllocID: 7, Generation: 3, Kind: FDMemfd, Size: 1 << 20}
	require.ErrorIs(t, ca.SendWithData([]Message{reply}, 1, 0, []byte{1}), ErrInvalid)
	_ = ca.Close()
	require.ErrorIs(t, ca.SendData(1, 0, []byte{1}), ErrClosed)
}

// FuzzRecvRouted feeds arbitrary bytes to a stream receiver that routes
// Data frames: nothing may panic, a routed payload always has the size the
// sink was asked for, and every frame returned decodes or was routed.
func FuzzRecvRouted(f *testing.F) {
	var seed []byte
	for _, m := range sampleMessages() {
		if m.Type().FDs() != 0 {
			continue
		}
		fr, err := AppendFrame(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		seed = append(binary.LittleEndian.AppendUint32(seed, uint32(len(fr))), fr...)
	}
	f.Add(seed)
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, stream []byte) {
		a, b := net.Pipe()
		c := NewConn(NewStreamTransport(b), ConnConfig{MaxFrame: 1024})
		defer c.Close()
		go func() { _, _ = a.Write(stream); _ = a.Close() }()
		sink := func(id, off uint64, n int) ([]byte, error) {
			if n <= 0 || n > MaxDataPayload {
				t.Fatalf("sink asked for %d bytes", n)
			}
			if off%2 == 1 {
				return nil, nil
			}
			return make([]byte, n), nil
		}
		if len(stream) > 0 && stream[0]&1 == 1 {
			// A vector sink, cutting payloads in pieces (or returning
			// pieces of the wrong total, which must fail the frame).
			c.SetDataSinkV(func(id, off uint64, n int, into [][]byte) ([][]byte, error) {
				if n <= 0 || n > MaxDataPayload {
					t.Fatalf("sink asked for %d bytes", n)
				}
				switch off % 3 {
				case 0:
					return nil, nil
				case 1:
					b := make([]byte, n+int(id%2))
					return append(into, b[:n/2], b[n/2:]), nil
				}
				return append(into, make([]byte, n)), nil
			})
		}
		for {
			fr, err := c.RecvRouted(context.Background(), sink)
			if err != nil {
				return
			}
			if !fr.Routed {
				_, _ = fr.Message()
			}
		}
	})
}

// aheadConn counts the bytes read through Read (the read-ahead; readv
// goes through the raw socket, which SyscallConn hands out).
type aheadConn struct {
	net.Conn
	read atomic.Int64
}

func (c *aheadConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *aheadConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// TestRoutedDataNoReadAhead: on a socket, once a large payload was routed,
// the frames a large put sends before its own payload (replies riding
// along, its request) are read without reading ahead into that payload,
// which then goes straight to its place with readv: only frame bytes pass
// through the read-ahead buffer, whichever frames come first.
func TestRoutedDataNoReadAhead(t *testing.T) {
	const size = 1 << 20
	for _, tc := range []struct {
		name string
		lead []Message // before each put's request
	}{
		{"request", nil},
		{"replies and request", []Message{&Completion{RequestID: 7}, &Completion{RequestID: 8}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tcpPair(t)
			ab := &aheadConn{Conn: b}
			ca, cb := NewConn(NewStreamTransport(a), ConnConfig{}), NewConn(NewStreamTransport(ab), ConnConfig{})
			t.Cleanup(func() {
				_ = ca.Close()
				_ = cb.Close()
			})
			const puts = 4
			src := bytes.Repeat([]byte("0123456789abcdef"), size/16)
			errc := make(chan error, 1)
			go func() {
				err := ca.SendData(100, 0, src) // a large payload first
				for i := uint64(1); i <= puts && err == nil; i++ {
					put := &Put{Request{RequestID: i, Key: testKey(), Length: size, Local: Local{Kind: LocalInline}}}
					err = ca.SendWithData(append(append([]Message(nil), tc.lead...), put), i, 0, src)
				}
				errc <- err
			}()
			dst := make([]byte, size)
			sink := func(id, off uint64, n int) ([]byte, error) { return dst[off : off+uint64(n)], nil }
			frames := (puts + 1) + puts*(len(tc.lead)+1)
			// Let the sender fill the socket: a reader that reads ahead
			// then finds payload bytes behind each request.
			time.Sleep(50 * time.Millisecond)
			var first int64 // read ahead up to the first payload's end
			for i := range frames {
				f, err := cb.RecvRouted(context.Background(), sink)
				require.NoError(t, err)
				if f.Routed {
					require.Equal(t, src, dst)
					clear(dst)
				}
				if i == 0 {
					first = ab.read.Load()
				}
			}
			require.NoError(t, <-errc)
			// After the first payload, each put's frames before its
			// payload and its Data frame's head: well under a KiB a put.
			require.Less(t, ab.read.Load()-first, int64(puts*1024), "bytes read ahead after the first payload")
		})
	}
}
