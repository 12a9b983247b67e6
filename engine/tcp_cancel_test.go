package engine

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/wire"
)

// tcpPair is an engine dialing another over TCP (lanes as given).
func tcpPair(t *testing.T, lanes int) (user, owner *Engine, ep *Endpoint) {
	t.Helper()
	owner = newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	user = newEngine(t, Config{TCPLanes: lanes, Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ep, err = user.Dial(context.Background(), "tcp", l.Addr(), WithTransport(TransportTCP))
	require.NoError(t, err)
	return user, owner, ep
}

// waitFor polls cond until it holds (or fails the test after 20 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatal("timed out waiting for " + what)
		}
	}
}

// TestTCPCancelPut: cancelling the ctx of a large Put mid-transfer stops
// its Data frames; the future resolves with ErrCanceled, the owner learns
// the Put is over (the connection stays in step: later Puts work), and no
// copy is left in flight on either side.
func TestTCPCancelPut(t *testing.T) {
	const total = 128 << 20
	for _, tc := range []struct {
		name  string
		lanes int
		dst   Location
	}{
		{"into gaudi memory, one lane", 1, Gaudi(0)},
		{"into gaudi memory, three lanes", 3, Gaudi(0)},
		{"into host memory", 1, Host},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, owner, ep := tcpPair(t, tc.lanes)
			dst, err := owner.Alloc(total, tc.dst)
			require.NoError(t, err)
			key, err := dst.Export()
			require.NoError(t, err)
			src, _ := user.Alloc(total, Host)
			fill(src.Bytes(), 5)
			if tc.dst != Host {
				// The owner's device stalls: the Put is held mid-way by
				// back-pressure.
				owner.cp.Devs[0].Sim.DelayNextCS(1000, time.Second)
			}
			ctx, cancel := context.WithCancel(context.Background())
			f := ep.Put(ctx, src.All(), key)
			waitFor(t, "the first bytes", func() bool { return ep.Stats().BytesOut > 0 })
			cancel()
			if tc.dst != Host {
				owner.cp.Devs[0].Sim.DelayNextCS(0, 0)
			}
			<-f.Done()
			require.ErrorIs(t, f.Err(), ErrCanceled)
			require.ErrorIs(t, f.Err(), context.Canceled)
			require.Regexp(t, `(put|request) [0-9]+`, f.Err().Error(), "the error names the request")
			sent := ep.Stats().BytesOut
			require.Less(t, sent, uint64(total), "the Put went on to the end")
			time.Sleep(50 * time.Millisecond)
			require.Equal(t, sent, ep.Stats().BytesOut, "bytes sent after the future resolved")

			// The connection is in step: a Put after it lands.
			small, _ := user.Alloc(4096, Host)
			fill(small.Bytes(), 6)
			require.NoError(t, ep.PutSync(context.Background(), small.All(), key.Slice(0, 4096)))
			back, _ := owner.Alloc(4096, Host)
			require.NoError(t, owner.CopySync(context.Background(), back.All(), dst.Slice(0, 4096)))
			require.Equal(t, small.Bytes(), back.Bytes())
			waitFor(t, "the owner's copies to end", func() bool { return owner.Stats().InFlight == 0 })
			require.Zero(t, user.Stats().InFlight)
			require.NoError(t, ep.Err())
		})
	}
}

// TestTCPCancelGet: cancelling the ctx of a large Get mid-transfer
// resolves it with ErrCanceled once nothing writes the local buffer any
// more: the buffer does not change after, and the endpoint goes on.
func TestTCPCancelGet(t *testing.T) {
	const total = 128 << 20
	for _, tc := range []struct {
		name  string
		local Location
	}{
		{"into host memory", Host},
		{"into gaudi memory", Gaudi(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, owner, ep := tcpPair(t, 1)
			src, err := owner.Alloc(total, Gaudi(0))
			require.NoError(t, err)
			key, err := src.Export()
			require.NoError(t, err)
			local, err := user.Alloc(total, tc.local)
			require.NoError(t, err)
			// The owner's device (reading the source) stalls: the Get's
			// answer comes slowly.
			owner.cp.Devs[0].Sim.DelayNextCS(1000, 20*time.Millisecond)
			defer owner.cp.Devs[0].Sim.DelayNextCS(0, 0)
			ctx, cancel := context.WithCancel(context.Background())
			f := ep.Get(ctx, local.All(), key)
			waitFor(t, "the first bytes", func() bool { return ep.Stats().BytesIn > 0 })
			cancel()
			<-f.Done()
			require.ErrorIs(t, f.Err(), ErrCanceled)
			require.Less(t, ep.Stats().BytesIn, uint64(total), "the Get went on to the end")
			contents := func() []byte {
				if tc.local == Host {
					return bytes.Clone(local.Bytes())
				}
				h, err := user.Alloc(total, Host)
				require.NoError(t, err)
				defer h.Free()
				require.NoError(t, user.CopySync(context.Background(), h.All(), local.All()))
				return bytes.Clone(h.Bytes())
			}
			snap := contents()
			require.Zero(t, user.Stats().InFlight, "a copy into the local buffer outlived the future")
			owner.cp.Devs[0].Sim.DelayNextCS(0, 0)

			// The endpoint goes on; the canceled Get's bytes still coming
			// are dropped, not landed.
			small, _ := user.Alloc(4096, Host)
			require.NoError(t, ep.GetSync(context.Background(), small.All(), key.Slice(0, 4096)))
			time.Sleep(100 * time.Millisecond)
			require.True(t, bytes.Equal(snap, contents()), "the local buffer changed after the future resolved")
			waitFor(t, "the owner's copies to end", func() bool { return owner.Stats().InFlight == 0 })
			require.Zero(t, user.Stats().InFlight)
			require.NoError(t, ep.Err())
		})
	}
}

// fakeOwner is a peer that owns key's memory (it speaks as key's engine)
// and records what a requester sends it: Data frames of each request,
// Cancels. It reads nothing until go is closed, once the first frame is
// in.
type fakeOwner struct {
	addr   string
	resume chan struct{}
	mu     sync.Mutex
	data   map[uint64]uint64 // request id: bytes received, in order
	zeros  map[uint64]uint64 // request id: of which zero bytes
	cancel []wire.Cancel
	gets   chan uint64
}

func startFakeOwner(t *testing.T, owner *Engine, caps wire.Caps) *fakeOwner {
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fo := &fakeOwner{addr: nl.Addr().String(), resume: make(chan struct{}), data: map[uint64]uint64{}, zeros: map[uint64]uint64{}, gets: make(chan uint64, 8)}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = nl.Close()
		<-done
	})
	go func() {
		defer close(done)
		nc, err := nl.Accept()
		if err != nil {
			return
		}
		c := wire.NewConn(wire.NewStreamTransport(nc), wire.ConnConfig{MaxFrame: tcp.MaxFrame})
		defer c.Close()
		f, err := c.Recv(context.Background())
		if err != nil {
			return
		}
		var h wire.Hello
		if f.Decode(&h) != nil {
			return
		}
		hello := fakeHello()
		hello.Caps = wire.CapInlineData | wire.CapHeartbeat | caps
		hello.EngineID = owner.ident.hello.EngineID // the key's owner
		ack, err := wire.Negotiate(hello, h)
		if err != nil {
			return
		}
		_ = c.Send(&ack)
		buf := make([]byte, tcp.Chunk)
		first := true
		for {
			f, err := c.RecvRouted(context.Background(), func(id, off uint64, n int) ([]byte, error) {
				fo.mu.Lock()
				defer fo.mu.Unlock()
				if off != fo.data[id] {
					return nil, errors.New("data out of order")
				}
				fo.data[id] += uint64(n)
				return buf[:n], nil
			})
			if err != nil {
				return
			}
			switch {
			case f.Routed:
				fo.mu.Lock()
				n := f.Header.Length - 8
				if !slices.ContainsFunc(buf[:n], func(b byte) bool { return b != 0 }) {
					fo.zeros[f.Header.RequestID] += uint64(n)
				}
				fo.mu.Unlock()
			case f.Header.Type == wire.TypeCancel:
				var m wire.Cancel
				if f.Decode(&m) == nil {
					fo.mu.Lock()
					fo.cancel = append(fo.cancel, m)
					fo.mu.Unlock()
				}
			case f.Header.Type == wire.TypeGet:
				fo.gets <- f.Header.RequestID // never answered
			}
			if first {
				first = false
				<-fo.resume
			}
		}
	}()
	return fo
}

// TestTCPCancelPutTellsTheOwner: a Put canceled mid-way ends with a Cancel
// naming the bytes sent, for an owner that announced CapCancel; an owner
// that did not gets zeros for the rest (it waits for every byte), never a
// Cancel it would not understand.
func TestTCPCancelPutTellsTheOwner(t *testing.T) {
	const total = 64 << 20
	for _, tc := range []struct {
		name string
		caps wire.Caps
	}{
		{"owner understands Cancel", wire.CapCancel},
		{"older owner", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner := newEngine(t, Config{Devices: DevicesNone})
			b, _ := owner.Alloc(total, Host)
			key, err := b.Export()
			require.NoError(t, err)
			fo := startFakeOwner(t, owner, tc.caps)
			e := newEngine(t, Config{Devices: DevicesNone, TCPLanes: 1})
			ep, err := e.Dial(context.Background(), "tcp", fo.addr, WithTransport(TransportTCP))
			require.NoError(t, err)
			src, _ := e.Alloc(total, Host)
			fill(src.Bytes(), 1) // no zero chunk
			ctx, cancel := context.WithCancel(context.Background())
			f := ep.Put(ctx, src.All(), key)
			waitFor(t, "the first bytes", func() bool { return ep.Stats().BytesOut > 0 })
			cancel()
			close(fo.resume)
			<-f.Done()
			require.ErrorIs(t, f.Err(), ErrCanceled)
			var id uint64
			waitFor(t, "the owner to hear the end of the Put", func() bool {
				fo.mu.Lock()
				defer fo.mu.Unlock()
				for k := range fo.data {
					id = k
				}
				return len(fo.cancel) > 0 || fo.data[id] == total
			})
			fo.mu.Lock()
			defer fo.mu.Unlock()
			if tc.caps&wire.CapCancel != 0 {
				require.Equal(t, []wire.Cancel{{RequestID: id, Sent: fo.data[id]}}, fo.cancel)
				require.Less(t, fo.data[id], uint64(total))
				require.Zero(t, fo.zeros[id])
			} else {
				require.Empty(t, fo.cancel)
				require.Equal(t, uint64(total), fo.data[id])
				require.NotZero(t, fo.zeros[id], "the rest was not zeros")
			}
			require.NoError(t, ep.Err())
		})
	}
}

// TestTCPGetCtxBoundsTheWait: a Get whose owner never answers resolves
// when its ctx expires (ErrTimeout wrapping the deadline), and the owner
// is asked to stop.
func TestTCPGetCtxBoundsTheWait(t *testing.T) {
	owner := newEngine(t, Config{Devices: DevicesNone})
	b, _ := owner.Alloc(4096, Host)
	key, err := b.Export()
	require.NoError(t, err)
	fo := startFakeOwner(t, owner, wire.CapCancel)
	close(fo.resume)
	e := newEngine(t, Config{Devices: DevicesNone, TCPLanes: 1})
	ep, err := e.Dial(context.Background(), "tcp", fo.addr, WithTransport(TransportTCP))
	require.NoError(t, err)
	h, _ := e.Alloc(4096, Host)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	f := ep.Get(ctx, h.All(), key)
	<-f.Done()
	require.ErrorIs(t, f.Err(), ErrTimeout)
	require.ErrorIs(t, f.Err(), context.DeadlineExceeded)
	require.Regexp(t, `(get|request) [0-9]+`, f.Err().Error(), "the error names the request")
	id := <-fo.gets
	waitFor(t, "the Cancel", func() bool {
		fo.mu.Lock()
		defer fo.mu.Unlock()
		return len(fo.cancel) == 1
	})
	fo.mu.Lock()
	require.Equal(t, wire.Cancel{RequestID: id}, fo.cancel[0])
	fo.mu.Unlock()
	require.NoError(t, ep.Err())
}
