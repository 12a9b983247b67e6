package tcp

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// hostKey is a key to n bytes of host memory (the fake owner's Lookup
// grants any).
func hostKey(n uint64) wire.RemoteKey {
	return wire.RemoteKey{MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead | wire.KeyWrite, Length: max(n, 1), GrantLen: max(n, 1), Len: n}
}

func fillBytes(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed | 1 // never zero
	}
}

func TestPutGet(t *testing.T) {
	for _, n := range []int{1, 4096, Chunk + 3, 3 * Chunk} {
		a, b := pair(t, 3*Chunk, wire.CapCancel)
		src := &hostBuf{mem: make([]byte, n)}
		fillBytes(src.mem, 3)
		c := newCompletion()
		a.path.Start(context.Background(), datapath.Req{Put: true, Local: datapath.Mem{B: src, Len: uint64(n)}, Key: hostKey(uint64(n))}, c)
		require.NoError(t, c.wait(t), "Put of %d", n)
		require.Equal(t, src.mem, b.env.mem.mem[:n])

		back := &hostBuf{mem: make([]byte, n)}
		c = newCompletion()
		a.path.Start(context.Background(), datapath.Req{Local: datapath.Mem{B: back, Len: uint64(n)}, Key: hostKey(uint64(n))}, c)
		require.NoError(t, c.wait(t), "Get of %d", n)
		require.Equal(t, src.mem, back.mem)

		var st datapath.Stats
		a.path.Stats(&st)
		require.Equal(t, uint64(n), st.BytesOut)
		require.Equal(t, uint64(n), st.BytesIn)
		require.Equal(t, 1, st.Lanes)
	}
}

// TestCanceledPut: a Put whose ctx ends resolves with ErrCanceled and the
// owner is left with nothing in progress (it was told, or got every
// byte), whether or not it understands wire.Cancel; the connection stays
// in step.
func TestCanceledPut(t *testing.T) {
	const n = 64 << 20
	for _, caps := range []wire.Caps{wire.CapCancel, 0} {
		a, b := pair(t, n, caps)
		src := &hostBuf{mem: make([]byte, n)}
		fillBytes(src.mem, 1)
		for _, when := range []time.Duration{0, 100 * time.Microsecond, time.Millisecond} {
			ctx, cancel := context.WithCancel(context.Background())
			c := newCompletion()
			if when == 0 {
				cancel()
			} else {
				time.AfterFunc(when, cancel)
			}
			a.path.Start(ctx, datapath.Req{Put: true, Local: datapath.Mem{B: src, Len: n}, Key: hostKey(uint64(n))}, c)
			err := c.wait(t)
			if err != nil { // it may have finished first
				require.ErrorIs(t, err, gxerr.Canceled)
				require.ErrorIs(t, err, context.Canceled)
			}
			cancel()
			require.Eventually(t, func() bool {
				b.path.mu.Lock()
				defer b.path.mu.Unlock()
				return len(b.path.inbound) == 0
			}, 10*time.Second, time.Millisecond, "the owner still waits for the Put's bytes (caps %#x)", caps)
		}
		c := newCompletion()
		small := &hostBuf{mem: []byte("in step")}
		a.path.Start(context.Background(), datapath.Req{Put: true, Local: datapath.Mem{B: small, Len: 7}, Key: hostKey(uint64(7))}, c)
		require.NoError(t, c.wait(t))
		require.Equal(t, small.mem, b.env.mem.mem[:7])
		require.NoError(t, a.Err())
		require.NoError(t, b.Err())
	}
}

// TestCanceledGet: a Get whose deadline passes while its answer arrives
// resolves with ErrTimeout; its buffer is not written after, and the rest
// of its answer is dropped.
func TestCanceledGet(t *testing.T) {
	const n = 64 << 20
	a, b := pair(t, n, wire.CapCancel)
	fillBytes(b.env.mem.mem, 2)
	dst := &hostBuf{mem: make([]byte, n)}
	c := newCompletion()
	a.path.Start(context.Background(), datapath.Req{Local: datapath.Mem{B: dst, Len: n}, Key: hostKey(uint64(n)), Deadline: time.Now().Add(2 * time.Millisecond)}, c)
	err := c.wait(t)
	if err == nil {
		t.Skip("the Get finished before its deadline")
	}
	require.ErrorIs(t, err, gxerr.Timeout)
	snap := bytes.Clone(dst.mem)
	c = newCompletion()
	small := &hostBuf{mem: make([]byte, 8)}
	a.path.Start(context.Background(), datapath.Req{Local: datapath.Mem{B: small, Len: 8}, Key: hostKey(uint64(8))}, c)
	require.NoError(t, c.wait(t))
	require.Equal(t, b.env.mem.mem[:8], small.mem)
	time.Sleep(20 * time.Millisecond)
	require.True(t, bytes.Equal(snap, dst.mem), "the buffer was written after the Get resolved")
}

func TestRoute(t *testing.T) {
	env := &fakeEnv{mem: &hostBuf{mem: make([]byte, 64)}}
	c := &fakeCtrl{env: env, dialer: true, nextID: 1, pending: map[uint64]func(wire.Frame, error){}, done: make(chan struct{})}
	p := newPath(New(env), c)
	c.path = p
	issued := p.newID() // 3
	dst := &hostBuf{mem: make([]byte, 16)}
	in := &inbound{id: 2, dst: datapath.Mem{B: dst, Len: 16}, n: 16, onDone: discardDone{}}
	require.NoError(t, p.addInbound(in))
	require.Error(t, p.addInbound(in), "an id in progress")
	for _, tc := range []struct {
		name    string
		id, off uint64
		n       int
		ok      bool
		dropped bool
	}{
		{"a request never made", 4, 0, 1, false, false},
		{"our id, not yet issued", issued + 2, 0, 1, false, false},
		{"our id, given up on", issued, 0, 1, true, true},
		{"out of order", 2, 4, 1, false, false},
		{"beyond the request", 2, 0, 17, false, false},
		{"in order", 2, 0, 8, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := p.route(tc.id, tc.off, tc.n)
			if !tc.ok {
				require.ErrorIs(t, err, wire.ErrMalformed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.dropped, b == nil)
			if b != nil {
				require.Len(t, b, tc.n)
				p.Landed()
			}
		})
	}
	in.mu.Lock()
	require.Equal(t, uint64(8), in.got)
	in.mu.Unlock()
}

// Soak 20261124 (unresolved TCP futures): the endpoint failed while its
// reader was reading a Get's Data frame (the link went down, the read
// hit PeerTimeout). The failure answered the pending reply, which took
// the inbound out of the path's inbound map and canceled it, but it could
// not finish while routed; the reader's abortRouting then cleared routing
// without finishing it, and cancelInbound no longer saw it: the Get's
// landing part never completed and its future never resolved.
func TestRegressInboundCanceledWhileRoutedFinishesOnAbort(t *testing.T) {
	env := &fakeEnv{mem: &hostBuf{mem: make([]byte, 4096)}}
	p := newPath(New(env), &fakeCtrl{env: env})
	done := make(chan error, 1)
	in := &inbound{id: 1, dst: datapath.Mem{B: env.mem, Len: 4096}, n: 4096, onDone: doneFunc(func(err error) { done <- err })}
	in.mu.Lock()
	in.routing = true // the reader is in the middle of its Data frame
	in.got = 1024
	in.mu.Unlock()
	p.cur = routed{in: in, n: 1024, pieces: []piece{{dst: in.dst.Sub(1024, 1024)}}}
	why := gxerr.New(gxerr.Peer, "test: connection lost", nil)
	in.cancel(why) // the failure's reply (onReply) or the op's timeout
	select {
	case <-done:
		t.Fatal("finished while still routed")
	default:
	}
	p.abortRouting() // the read failed: the reader unwinds
	select {
	case err := <-done:
		require.ErrorIs(t, err, gxerr.Peer)
	default:
		t.Fatal("a canceled inbound was not finished when its route was aborted: its future never resolves")
	}
}

func TestServeCancel(t *testing.T) {
	env := &fakeEnv{mem: &hostBuf{mem: make([]byte, 64)}}
	c := &fakeCtrl{env: env, pending: map[uint64]func(wire.Frame, error){}, done: make(chan struct{})}
	p := newPath(New(env), c)
	var ended error
	in := &inbound{id: 3, dst: datapath.Mem{B: env.mem, Len: 64}, n: 64, onDone: doneFunc(func(err error) { ended = err })}
	require.NoError(t, p.addInbound(in))
	_, err := p.route(3, 0, 16)
	require.NoError(t, err)
	p.Landed()
	for _, tc := range []struct {
		name string
		m    wire.Cancel
		err  bool
	}{
		{"of our parity", wire.Cancel{RequestID: 4}, true},
		{"sent disagrees with what landed", wire.Cancel{RequestID: 3, Sent: 8}, true},
		{"of a request not in progress", wire.Cancel{RequestID: 5}, false},
		{"in step", wire.Cancel{RequestID: 3, Sent: 16}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := p.Handle(nil, &tc.m)
			require.True(t, ok)
			require.Equal(t, tc.err, err != nil, "%v", err)
		})
	}
	require.ErrorIs(t, ended, errPeerCanceled)
	require.True(t, in.quiet)
	require.Empty(t, p.inbound)
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		n, parts uint64
	}{
		{4 << 20, 3}, {16<<20 + 3, 3}, {laneMin, 2}, {8192, 8}, {12288, 3},
	} {
		var total, prevEnd uint64
		for i := range tc.parts {
			off, cnt := split(tc.n, tc.parts, i)
			if cnt > 0 {
				require.Equal(t, prevEnd, off, "parts are contiguous")
				require.Zero(t, off%4096, "parts are page-aligned")
			}
			total += cnt
			prevEnd = off + cnt
		}
		require.Equal(t, tc.n, total, "%d over %d", tc.n, tc.parts)
	}
}

func TestMulti(t *testing.T) {
	c := newCompletion()
	m := &multi{c: c}
	m.left.Store(3)
	m.Complete(0, nil)
	m.Complete(0, errors.New("first"))
	select {
	case <-c.done:
		t.Fatal("completed before its last part")
	default:
	}
	m.Complete(0, errors.New("second"))
	require.EqualError(t, c.wait(t), "first")
}

// TestQueuedPutAbandoned: host Puts wait in the connection's queue behind
// the one being sent; one abandoned there resolves at once with its
// context's error, sending nothing, while the Put ahead of it is still
// going out; the queue then goes on and the next Put lands whole.
func TestQueuedPutAbandoned(t *testing.T) {
	const big, small = 64 << 20, 1 << 20
	a, b := pair(t, big, wire.CapCancel)
	src := &hostBuf{mem: make([]byte, big)}
	fillBytes(src.mem, 3)
	first := newCompletion()
	a.path.Start(context.Background(), datapath.Req{Put: true, Local: datapath.Mem{B: src, Len: big}, Key: hostKey(big)}, first)
	ctx, cancel := context.WithCancel(context.Background())
	queued := newCompletion()
	a.path.Start(ctx, datapath.Req{Put: true, Local: datapath.Mem{B: src, Len: small}, Key: hostKey(small)}, queued)
	require.Eventually(t, func() bool { return a.path.puts.waiting() == 1 }, 5*time.Second, time.Millisecond,
		"the second Put waits behind the first")
	cancel()
	err := queued.wait(t)
	require.ErrorIs(t, err, gxerr.Canceled)
	require.Less(t, a.path.bytesOut.Load(), uint64(big), "resolved while the first Put was still going out")
	require.Zero(t, a.path.puts.waiting())
	require.NoError(t, first.wait(t))
	require.Equal(t, src.mem, b.env.mem.mem[:big])
	// The last Put lands what the first did not: the destination's first
	// bytes cleared, and its source's changed.
	clear(b.env.mem.mem[:small])
	fillBytes(src.mem[:small], 5)
	last := newCompletion()
	a.path.Start(context.Background(), datapath.Req{Put: true, Local: datapath.Mem{B: src, Len: small}, Key: hostKey(small)}, last)
	require.NoError(t, last.wait(t))
	require.Equal(t, uint64(big+small), a.path.bytesOut.Load(), "the abandoned Put sent nothing")
	require.Equal(t, src.mem[:small], b.env.mem.mem[:small])
}
