package wire

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/fd"
)

// pipeConns returns two Conns over the two ends of a net.Pipe.
func pipeConns(t *testing.T, cfg ConnConfig) (*Conn, *Conn) {
	a, b := net.Pipe()
	ca, cb := NewConn(NewStreamTransport(a), cfg), NewConn(NewStreamTransport(b), cfg)
	t.Cleanup(func() {
		_ = ca.Close()
		_ = cb.Close()
	})
	return ca, cb
}

func TestConnStreamRoundTrip(t *testing.T) {
	ca, cb := pipeConns(t, ConnConfig{})
	msgs := sampleMessages()
	errc := make(chan error, 1)
	go func() {
		for _, m := range msgs {
			if m.Type().FDs() != 0 {
				continue // a stream cannot carry fds
			}
			if err := ca.Send(m); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for _, m := range msgs {
		if m.Type().FDs() != 0 {
			continue
		}
		f, err := cb.Recv(context.Background())
		require.NoError(t, err)
		got, err := f.Message()
		require.NoError(t, err)
		require.True(t, reflect.DeepEqual(m, got), "got %#v want %#v", got, m)
	}
	require.NoError(t, <-errc)
}

func TestConnConcurrentWriters(t *testing.T) {
	ca, cb := pipeConns(t, ConnConfig{})
	const writers, per = 8, 200
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if err := ca.Send(&Completion{RequestID: uint64(w*per + i + 1), Status: Status(w)}); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	seen := make(map[uint64]bool)
	var c Completion
	for range writers * per {
		f, err := cb.Recv(context.Background())
		require.NoError(t, err)
		require.NoError(t, f.Decode(&c))
		require.Equal(t, Status((c.RequestID-1)/per), c.Status)
		require.False(t, seen[c.RequestID])
		seen[c.RequestID] = true
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
}

func TestConnRecvCancel(t *testing.T) {
	_, cb := pipeConns(t, ConnConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cb.Recv(ctx)
		errc <- err
	}()
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	// The cancellation deadline does not leak into the next Recv: it is
	// still usable and sees a frame sent later.
	ca2, cb2 := pipeConns(t, ConnConfig{})
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	_, err := cb2.Recv(ctx2)
	require.ErrorIs(t, err, context.Canceled)
	go func() { errc <- ca2.Send(&Bye{}) }()
	f, err := cb2.Recv(context.Background())
	require.NoError(t, err)
	require.Equal(t, TypeBye, f.Header.Type)
	require.NoError(t, <-errc)
}

func TestConnRecvCancelThenReuse(t *testing.T) {
	ca, cb := pipeConns(t, ConnConfig{})
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := cb.Recv(ctx)
			errc <- err
		}()
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
	}
	errc := make(chan error, 1)
	go func() { errc <- ca.Send(&Invalidate{AllocID: 1, Generation: 2}) }()
	f, err := cb.Recv(context.Background())
	require.NoError(t, err)
	var inv Invalidate
	require.NoError(t, f.Decode(&inv))
	require.Equal(t, Invalidate{AllocID: 1, Generation: 2}, inv)
	require.NoError(t, <-errc)
}

func TestConnReadTimeout(t *testing.T) {
	_, cb := pipeConns(t, ConnConfig{ReadTimeout: time.Millisecond})
	_, err := cb.Recv(context.Background())
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, cb2 := pipeConns(t, ConnConfig{})
	_, err = cb2.Recv(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestConnCloseUnblocks(t *testing.T) {
	// A Recv blocked in the transport is unblocked by Close.
	_, cb := pipeConns(t, ConnConfig{})
	errc := make(chan error, 1)
	go func() {
		_, err := cb.Recv(context.Background())
		errc <- err
	}()
	require.NoError(t, cb.Close())
	require.ErrorIs(t, <-errc, ErrClosed)
	require.NoError(t, cb.Close(), "Close is idempotent")
	_, err := cb.Recv(context.Background())
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, cb.Send(&Bye{}), ErrClosed)

	// A Send blocked in the transport (net.Pipe: nobody reads) too.
	ca, _ := pipeConns(t, ConnConfig{})
	go func() { errc <- ca.Send(&Bye{}) }()
	require.NoError(t, ca.Close())
	require.ErrorIs(t, <-errc, ErrClosed)
}

// TestConnSendCtx: a SendCtx whose ctx ends while its frame is written to
// a peer that does not read, or while an earlier Send holds the
// connection, returns ctx's error at once, nothing of the frame sent: the
// connection is still usable, and the next frame is the one the peer gets
// next. A write ctx cuts part-way breaks the stream (ErrBroken).
func TestConnSendCtx(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, ca *Conn, raw net.Conn) // what holds up the SendCtx
		first  Type                                       // the first frame the peer then gets (0: none, broken)
	}{
		{"writing", func(*testing.T, *Conn, net.Conn) {}, TypeInvalidate},
		{"waiting for an earlier Send", func(t *testing.T, ca *Conn, _ net.Conn) {
			go func() { _ = ca.Send(&Heartbeat{}) }()
			require.Eventually(t, func() bool { return len(ca.wmu) == 1 }, 5*time.Second, time.Millisecond)
		}, TypeHeartbeat},
		{"cut part-way", func(t *testing.T, _ *Conn, raw net.Conn) {
			go func() { _, _ = io.ReadFull(raw, make([]byte, 3)) }() // then reads no more
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, raw := net.Pipe()
			ca, cb := NewConn(NewStreamTransport(a), ConnConfig{}), NewConn(NewStreamTransport(raw), ConnConfig{})
			t.Cleanup(func() {
				_ = ca.Close()
				_ = cb.Close()
			})
			tc.before(t, ca, raw)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- ca.SendCtx(ctx, &Bye{}) }()
			var err error
			select {
			case err = <-errc:
			case <-time.After(5 * time.Second):
				t.Fatal("SendCtx did not return when its ctx ended")
			}
			require.ErrorIs(t, err, context.DeadlineExceeded)
			if tc.first == 0 {
				require.ErrorIs(t, err, ErrBroken)
				require.ErrorIs(t, ca.Send(&Invalidate{}), ErrBroken, "the stream stays broken")
				return
			}
			require.NotErrorIs(t, err, ErrBroken)
			go func() { errc <- ca.Send(&Invalidate{AllocID: 1}) }()
			f, err := cb.Recv(context.Background())
			require.NoError(t, err)
			require.Equal(t, tc.first, f.Header.Type, "the Bye was not sent")
			if tc.first != TypeInvalidate {
				f, err = cb.Recv(context.Background())
				require.NoError(t, err)
				require.Equal(t, TypeInvalidate, f.Header.Type, "the Bye was not sent")
			}
			require.NoError(t, <-errc)
		})
	}
}

func TestConnPeerClosed(t *testing.T) {
	ca, cb := pipeConns(t, ConnConfig{})
	require.NoError(t, ca.Close())
	_, err := cb.Recv(context.Background())
	require.ErrorIs(t, err, io.EOF)
}

func TestConnSendChecks(t *testing.T) {
	ca, _ := pipeConns(t, ConnConfig{MaxFrame: 256})
	// Wrong fd count for the type.
	require.ErrorIs(t, ca.Send(&ImportReply{RequestID: 1, Kind: FDMemfd, Size: 1}), ErrInvalid)
	dummy, err := fd.New(int(os.Stdin.Fd()))
	require.NoError(t, err)
	defer dummy.Disown()
	require.ErrorIs(t, ca.Send(&Bye{}, dummy), ErrInvalid)
	// A stream transport refuses fds.
	require.ErrorIs(t, ca.Send(&ImportReply{RequestID: 1, Kind: FDMemfd, Size: 1}, dummy, dummy), ErrFDsNotSupported)
	// Larger than MaxFrame.
	require.ErrorIs(t, ca.Send(&Data{RequestID: 1, Bytes: make([]byte, 300)}), ErrTooLarge)
	// Encoding errors pass through.
	require.ErrorIs(t, ca.Send(&Error{}), ErrInvalid)
}

// rawTransport lets a test inject arbitrary frames and fds into a Conn.
type rawTransport struct {
	frames [][]byte
	fds    [][]*fd.FD
}

func (r *rawTransport) Send([]byte, []*fd.FD) error { return nil }
func (r *rawTransport) Close() error                { return nil }
func (r *rawTransport) Recv(buf []byte) (int, []*fd.FD, error) {
	if len(r.frames) == 0 {
		return 0, nil, io.EOF
	}
	f, fds := r.frames[0], r.fds[0]
	r.frames, r.fds = r.frames[1:], r.fds[1:]
	return copy(buf, f), fds, nil
}

func TestConnRecvValidatesAndClosesFDs(t *testing.T) {
	newFD := func() *fd.FD {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		require.NoError(t, w.Close())
		f, err := fd.New(int(r.Fd()))
		require.NoError(t, err)
		// os.File must not close it too.
		_, err = r.SyscallConn()
		require.NoError(t, err)
		nf, err := f.Dup()
		require.NoError(t, err)
		_ = r.Close()
		f.Disown()
		return nf
	}
	reply, err := AppendFrame(nil, &ImportReply{RequestID: 1, Kind: FDMemfd, Size: 1})
	require.NoError(t, err)
	bye, err := AppendFrame(nil, &Bye{})
	require.NoError(t, err)

	a, b, c, d := newFD(), newFD(), newFD(), newFD()
	rt := &rawTransport{
		frames: [][]byte{reply, bye, reply[:10], reply},
		fds:    [][]*fd.FD{{a, b, d}, {c}, nil, nil},
	}
	conn := NewConn(rt, ConnConfig{})
	_, err = conn.Recv(context.Background()) // 3 fds, header says 2
	require.ErrorIs(t, err, ErrMalformed)
	require.Equal(t, -1, a.Int())
	require.Equal(t, -1, b.Int())
	require.Equal(t, -1, d.Int())
	_, err = conn.Recv(context.Background()) // Bye with an fd
	require.ErrorIs(t, err, ErrMalformed)
	require.Equal(t, -1, c.Int())
	_, err = conn.Recv(context.Background()) // truncated
	require.ErrorIs(t, err, ErrMalformed)
	_, err = conn.Recv(context.Background()) // header says 2 fds, none came
	require.ErrorIs(t, err, ErrMalformed)
	_, err = conn.Recv(context.Background())
	require.ErrorIs(t, err, io.EOF)
	require.NoError(t, conn.Close())
}

func TestStreamTransportBroken(t *testing.T) {
	a, b := net.Pipe()
	st := NewStreamTransport(b)
	defer st.Close()
	defer a.Close()
	go func() {
		_, _ = a.Write([]byte{0xff, 0xff, 0, 0}) // 65535-byte frame
	}()
	buf := make([]byte, 100)
	_, _, err := st.Recv(buf)
	require.ErrorIs(t, err, ErrTooLarge)
	_, _, err2 := st.Recv(buf)
	require.Equal(t, err, err2, "a desynchronised stream stays broken")

	c, d := net.Pipe()
	st2 := NewStreamTransport(d)
	defer st2.Close()
	go func() {
		_, _ = c.Write([]byte{0, 0, 0, 0})
		_ = c.Close()
	}()
	_, _, err = st2.Recv(buf)
	require.ErrorIs(t, err, ErrMalformed)

	e, f := net.Pipe()
	st3 := NewStreamTransport(f)
	defer st3.Close()
	go func() {
		_, _ = e.Write([]byte{10, 0, 0, 0, 1, 2})
		_ = e.Close()
	}()
	_, _, err = st3.Recv(buf)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.ErrorIs(t, st3.Send(nil, nil), ErrInvalid)
}

func TestStreamTransportLargeFrame(t *testing.T) {
	ca, cb := pipeConns(t, ConnConfig{MaxFrame: 4 << 20})
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	errc := make(chan error, 1)
	go func() { errc <- ca.Send(&Data{RequestID: 5, Offset: 9, Bytes: data}) }()
	f, err := cb.Recv(context.Background())
	require.NoError(t, err)
	var d Data
	require.NoError(t, f.Decode(&d))
	require.Equal(t, uint64(9), d.Offset)
	require.True(t, errors.Is(<-errc, nil))
	require.Equal(t, data, d.Bytes)
}

// countingConn counts the deadlines set on a net.Conn.
type countingConn struct {
	net.Conn
	mu          sync.Mutex
	reads, writ int
}

func (c *countingConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *countingConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writ++
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *countingConn) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads, c.writ
}

// TestConnTimeoutsArmedOnce: with ReadTimeout and WriteTimeout, frames
// that follow each other well within an eighth of them do not move the
// deadlines each time (a timer update per frame, on the path of every
// small message); a Recv bounded by its ctx's earlier deadline arms its
// own, and the next one ReadTimeout's again, not the expired one.
func TestConnTimeoutsArmedOnce(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := &countingConn{Conn: a}, &countingConn{Conn: b}
	cfg := ConnConfig{ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	sa, sb := NewConn(NewStreamTransport(ca), cfg), NewConn(NewStreamTransport(cb), cfg)
	t.Cleanup(func() {
		_ = sa.Close()
		_ = sb.Close()
	})
	const frames = 200
	errc := make(chan error, 1)
	go func() {
		for i := range frames {
			if err := sa.Send(&Invalidate{AllocID: uint64(i)}); err != nil {
				errc <- err
				return
			}
		}
		errc <- sa.SendWithData(nil, 7, 0, []byte("data"))
	}()
	for i := range frames + 1 {
		_, err := sb.Recv(context.Background())
		require.NoError(t, err, "frame %d", i)
	}
	require.NoError(t, <-errc)
	_, w := ca.counts()
	r, _ := cb.counts()
	require.LessOrEqual(t, w, 2, "write deadlines set for %d frames", frames+1)
	require.LessOrEqual(t, r, 2, "read deadlines set for %d frames", frames+1)

	// A ctx deadline before ReadTimeout's bounds that Recv alone.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	_, err := sb.Recv(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	go func() {
		time.Sleep(20 * time.Millisecond)
		errc <- sa.Send(&Bye{})
	}()
	f, err := sb.Recv(context.Background())
	require.NoError(t, err, "the next Recv is bounded by ReadTimeout again")
	require.Equal(t, TypeBye, f.Header.Type)
	require.NoError(t, <-errc)
}
