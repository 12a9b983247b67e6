package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cancelAfterWrite is a real loopback connection whose first Write, once
// the request is on the wire, cancels the call's context and waits until
// the cancel has set its past deadline: the cancel then comes exactly
// while the call is between sending and receiving, the window a
// scheduler hits only now and then.
type cancelAfterWrite struct {
	net.Conn
	cancel context.CancelFunc
	past   chan struct{} // closed at the first deadline set in the past
	once   sync.Once
	wrote  bool
}

func (c *cancelAfterWrite) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if !c.wrote {
		c.wrote = true
		c.cancel()
		select {
		case <-c.past:
		case <-time.After(30 * time.Second): // bounds a broken test only
		}
	}
	return n, err
}

func (c *cancelAfterWrite) SetDeadline(t time.Time) error {
	err := c.Conn.SetDeadline(t)
	if !t.IsZero() && t.Before(time.Now()) {
		c.once.Do(func() { close(c.past) })
	}
	return err
}

// TestCtlCallCancelledMidCall: a call whose context is cancelled while it
// waits for the answer returns at once, and the connection, whose next
// line may be the late answer to the cancelled request, is not used
// again: a later call fails without sending. Before the fix the cancel's
// past deadline was replaced by the read's own, so the call waited out
// its whole timeout (60 s here), and a later call took the cancelled
// request's late answer for its own.
func TestCtlCallCancelledMidCall(t *testing.T) {
	// The server answers each request (with its op) once answer is
	// closed, and reports the ops it read.
	answer := make(chan struct{})
	ops := make(chan string, 4)
	addr, srvDone := ctlServer(t, 4, func(sc net.Conn, line []byte) bool {
		op, ok := ctlOp(line)
		if !ok {
			return false
		}
		ops <- op
		<-answer
		return ctlAnswer(sc, op)
	})

	raw, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := &cancelAfterWrite{Conn: raw, cancel: cancel, past: make(chan struct{})}
	c := newCtlConn(conn, "test server")

	type result struct {
		r   *ctlMsg
		err error
	}
	res := make(chan result, 1)
	go func() {
		r, err := c.call(ctx, &ctlMsg{Op: opAlloc}, ctlTimeout)
		res <- result{r, err}
	}()
	var got result
	select {
	case got = <-res:
	case <-time.After(20 * time.Second): // far below ctlTimeout (60 s)
		close(answer) // the call then ends (with the answer): no leak
		<-res
		_ = c.Close()
		<-srvDone
		require.FailNow(t, "a cancelled call waits for its answer")
	}
	require.ErrorIs(t, got.err, context.Canceled)
	require.Nil(t, got.r)
	require.Equal(t, opAlloc, <-ops)

	// The server now answers the cancelled alloc; the next call must not
	// take that answer for its own.
	close(answer)
	r, err := c.call(context.Background(), &ctlMsg{Op: opFree}, 5*time.Second)
	require.ErrorIs(t, err, errAborted, "a call after a cancelled one got %+v", r)
	require.Contains(t, err.Error(), "unusable")

	require.NoError(t, c.Close())
	<-srvDone
	select {
	case op := <-ops:
		require.Failf(t, "sent on a broken connection", "the server read %q", op)
	default:
	}
}

// cancelAfterRead is a real loopback connection whose first Read that
// returns bytes (the whole reply line) cancels the call's context and
// waits until the cancel has set its past deadline before it returns
// them: the cancel comes after the reply arrived.
type cancelAfterRead struct {
	net.Conn
	cancel context.CancelFunc
	past   chan struct{}
	once   sync.Once
	read   bool
}

func (c *cancelAfterRead) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.read {
		c.read = true
		c.cancel()
		select {
		case <-c.past:
		case <-time.After(30 * time.Second): // bounds a broken test only
		}
	}
	return n, err
}

func (c *cancelAfterRead) SetDeadline(t time.Time) error {
	err := c.Conn.SetDeadline(t)
	if !t.IsZero() && t.Before(time.Now()) {
		c.once.Do(func() { close(c.past) })
	}
	return err
}

// TestCtlCallCancelledAfterReply: a context cancelled once the reply
// has arrived leaves the call successful and the connection usable (the
// reply was read whole: nothing is pending). Before the fix the cancel
// marked the connection unusable all the same, so the next request (a
// Close's bye, a free with a fresh context) failed.
func TestCtlCallCancelledAfterReply(t *testing.T) {
	addr, srvDone := ctlServer(t, 4, func(sc net.Conn, line []byte) bool {
		op, ok := ctlOp(line)
		return ok && ctlAnswer(sc, op)
	})
	raw, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCtlConn(&cancelAfterRead{Conn: raw, cancel: cancel, past: make(chan struct{})}, "test server")

	r, err := c.call(ctx, &ctlMsg{Op: opAlloc}, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, opAlloc, r.Op)
	r, err = c.call(context.Background(), &ctlMsg{Op: opFree}, 10*time.Second)
	require.NoError(t, err, "a call cancelled after its reply broke the connection")
	require.Equal(t, opFree, r.Op)
	require.NoError(t, c.Close())
	<-srvDone
}

// ctlServer serves one control connection on loopback for a test: it
// reads up to n request lines and hands each to serve with the
// connection, until serve returns false or the connection fails. It
// returns the address to dial and a channel closed once the server is
// done; the listener closes when the test ends.
func ctlServer(t *testing.T, n int, serve func(sc net.Conn, line []byte) bool) (addr string, done <-chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		sc, err := ln.Accept()
		if err != nil {
			return
		}
		defer func() { _ = sc.Close() }()
		r := bufio.NewReader(sc)
		for i := 0; i < n; i++ {
			line, err := r.ReadBytes('\n')
			if err != nil || !serve(sc, line) {
				return
			}
		}
	}()
	return ln.Addr().String(), srvDone
}

// ctlOp is the op of a request line, false if it does not parse.
func ctlOp(line []byte) (string, bool) {
	var m ctlMsg
	if json.Unmarshal(line, &m) != nil {
		return "", false
	}
	return m.Op, true
}

// ctlAnswer writes an answer with op to sc, false if it fails.
func ctlAnswer(sc net.Conn, op string) bool {
	b, _ := json.Marshal(&ctlMsg{Op: op})
	_, err := sc.Write(append(b, '\n'))
	return err == nil
}
