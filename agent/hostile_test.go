package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// TestHostileDialer: what a peer sends an agent is parsed as hostile; a
// bad message gets a refusal and the connection closed, and the agent
// serves others as before.
func TestHostileDialer(t *testing.T) {
	tests := []struct {
		name string
		msgs [][]byte
	}{
		{"garbage", [][]byte{[]byte("GET / HTTP/1.1")}},
		{"notify before hello", [][]byte{encodeNotify([]byte("x"))}},
		{"two hellos", [][]byte{encodeHello("m", 1, 0, 0, false), encodeHello("m", 1, 0, 0, false)}},
		{"wrong incarnation", [][]byte{encodeHello("m", 1, 12345, 0, false)}},
		{"metadata chunk", [][]byte{encodeHello("m", 1, 0, 0, false), encodeMeta([]byte("rec"))[0]}},
	}
	ctx := testCtx(t)
	ea, em := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{unix: true})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, err := em.Dial(ctx, "unix", a.Metadata().Unix)
			require.NoError(t, err)
			defer ep.Close()
			for _, m := range tt.msgs {
				require.NoError(t, ep.Send(ctx, m))
			}
			var refused bool
			for {
				b, err := ep.Recv(ctx)
				if err != nil {
					break // a closed the connection
				}
				m, err := decode(b)
				require.NoError(t, err)
				refused = refused || m.typ == msgRefuse
			}
			require.True(t, refused)
		})
	}
	require.Eventually(t, func() bool { return a.Stats().Inbound == 0 }, 10*time.Second, 10*time.Millisecond)
}

// TestHostileDialerWhileRecv: a peer that said hello sends a bad message,
// then a notification, while the agent's Recv polls the endpoints itself:
// the peer is refused and closed, its later notification is never
// delivered (whichever goroutine took the bad message), and Recv keeps
// its own deadline meanwhile (a refusal waits for the peer elsewhere).
// Every notification sent before the bad message is delivered: the
// ones Recv has not taken when the peers are gone are taken after.
func TestHostileDialerWhileRecv(t *testing.T) {
	ctx := testCtx(t)
	ea, em := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{unix: true})
	recvd := make(chan Notification, 100)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { // Recv, in short waits, all along
		for {
			select {
			case <-stop:
				// Every peer is gone, so nothing more comes in: what a
				// Recv whose ctx ended has not taken is still queued.
				// A Recv of an ended ctx takes it (and only then fails).
				dctx, cancel := context.WithCancel(ctx)
				cancel()
				for {
					n, err := a.Recv(dctx)
					if err != nil {
						if !errors.Is(err, engine.ErrCanceled) {
							done <- fmt.Errorf("draining Recv: %w", err)
							return
						}
						break
					}
					recvd <- n
				}
				done <- nil
				return
			default:
			}
			rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			t0 := time.Now()
			n, err := a.Recv(rctx)
			cancel()
			if err == nil {
				recvd <- n
			} else if d := time.Since(t0); d > 2*time.Second {
				done <- fmt.Errorf("a Recv of a 20 ms context returned after %v", d)
				return
			}
		}
	}()
	const rounds = 20
	for i := range rounds {
		ep, err := em.Dial(ctx, "unix", a.Metadata().Unix)
		require.NoError(t, err)
		name := fmt.Sprint("m", i)
		require.NoError(t, ep.Send(ctx, encodeHello(name, 1, 0, 0, false)))
		require.NoError(t, ep.Send(ctx, encodeNotify([]byte("before"))))
		// Not for an agent to receive; then a notification, if a has not
		// closed the connection already.
		require.NoError(t, ep.Send(ctx, encodeMeta([]byte("rec"))[0]))
		_ = ep.Send(ctx, encodeNotify([]byte("after")))
		for { // until a closed the connection
			if _, err := ep.Recv(ctx); err != nil {
				break
			}
		}
		ep.Close()
	}
	require.Eventually(t, func() bool { return a.Stats().Inbound == 0 }, 10*time.Second, 10*time.Millisecond)
	close(stop)
	require.NoError(t, <-done)
	close(recvd)
	got := 0
	for n := range recvd {
		require.Equal(t, "before", string(n.Msg), "from %s", n.From)
		got++
	}
	require.Equal(t, rounds, got)
	st := a.Stats()
	require.Equal(t, uint64(rounds), st.NotifyRecv)
	require.Zero(t, st.NotifyQueued)
}

// TestHostileServer: a "peer" answering the side channel with a
// malformed or inconsistent record is refused with ErrPeer (and
// ErrProtocol or meta.ErrMalformed), never cached.
func TestHostileServer(t *testing.T) {
	chunk := func(total, off uint32, data []byte) []byte {
		b := header(msgMetaChunk, 8+len(data))
		b = binary.LittleEndian.AppendUint32(b, total)
		b = binary.LittleEndian.AppendUint32(b, off)
		return append(b, data...)
	}
	tests := []struct {
		name  string
		reply [][]byte
	}{
		{"no hello", [][]byte{encodeNotify(nil)}},
		{"garbage record", append([][]byte{encodeHello("m", 7, 0, 1, false)}, encodeMeta([]byte("not a record"))...)},
		{"chunks out of order", [][]byte{encodeHello("m", 7, 0, 1, false), chunk(10, 5, []byte("12345"))}},
		{"record of another agent", append([][]byte{encodeHello("m", 7, 0, 1, false)}, encodeMeta(mustEncode(t, "other", 7))...)},
		{"record of another incarnation", append([][]byte{encodeHello("m", 7, 0, 1, false)}, encodeMeta(mustEncode(t, "m", 8))...)},
		{"refusal", [][]byte{encodeRefuse("no")}},
	}
	ctx := testCtx(t)
	ea, em := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	l, err := em.Listen("unix", sockDir(t)+"/m.sock")
	require.NoError(t, err)
	defer l.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := scriptedPeer(ctx, l, tt.reply, nil)
			_, err := a.Connect(ctx, l.Addr())
			require.ErrorIs(t, err, engine.ErrPeer)
			require.NoError(t, <-done)
			_, err = a.Peer(ctx, "m")
			require.Error(t, err)
		})
	}
}

func mustEncode(t *testing.T, name string, inc uint64) []byte {
	t.Helper()
	m := meta.Metadata{Name: name, Incarnation: inc, Version: 1}
	b, err := m.Encode()
	require.NoError(t, err)
	return b
}
