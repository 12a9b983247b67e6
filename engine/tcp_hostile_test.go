package engine

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/wire"
)

// TestTCPGaudiFrameOverChunk: a Data frame into Gaudi memory larger than
// the staging buffer it lands in (gxfer sends at most tcp.Chunk per
// frame; a frame may carry wire.MaxDataPayload) fails the peer's
// connection as malformed. It used to slice past the buffer and panic on
// the reader goroutine, ending the process. The engine goes on serving.
func TestTCPGaudiFrameOverChunk(t *testing.T) {
	e, l, dev, key := gaudiOverTCP(t, Config{}, 4<<20)
	for _, n := range []int{tcp.Chunk + 8, 2 * tcp.Chunk, wire.MaxDataPayload} {
		p := dialFake(t, l.Addr())
		put := &wire.Put{Request: wire.Request{RequestID: 3, Key: key.k, Length: uint64(n), Local: wire.Local{Kind: wire.LocalInline}}}
		_ = p.c.SendWithData([]wire.Message{put}, 3, 0, make([]byte, n)) // the engine may hang up first
		p.closedByPeer(t)
	}
	ctx := context.Background()
	e2 := newEngine(t, Config{Devices: DevicesNone})
	ep, err := e2.Dial(ctx, "tcp", l.Addr(), WithTransport(TransportTCP))
	require.NoError(t, err)
	h, _ := e2.Alloc(2*tcp.Chunk, Host)
	fill(h.Bytes(), 3)
	require.NoError(t, ep.PutSync(ctx, h.All(), key.Slice(0, 2*tcp.Chunk)))
	back, _ := e.Alloc(2*tcp.Chunk, Host)
	require.NoError(t, e.CopySync(ctx, back.All(), dev.Slice(0, 2*tcp.Chunk)))
	require.Equal(t, h.Bytes(), back.Bytes())
	require.NoError(t, ep.Close())
}

// stallMidFrame connects a raw peer that sends a Put of n bytes into key
// and then only the first 16 bytes of its Data frame: the engine's reader
// holds a staging buffer for it until the peer's timeout.
func stallMidFrame(t *testing.T, addr string, key wire.RemoteKey, n int) {
	t.Helper()
	p := dialFake(t, addr)
	require.NoError(t, p.c.Send(&wire.Put{Request: wire.Request{RequestID: 3, Key: key, Length: uint64(n), Local: wire.Local{Kind: wire.LocalInline}}}))
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(wire.HeaderSize+8+n))
	b = wire.Header{Version: wire.Version, Type: wire.TypeData, Length: uint32(8 + n), RequestID: 3}.Append(b)
	b = binary.LittleEndian.AppendUint64(b, 0)
	b = append(b, make([]byte, 16)...)
	_, err := p.nc.Write(b)
	require.NoError(t, err)
}

// TestTCPStalledPeersDoNotLockOthersOut: peers that hold the engine's
// staging buffers of Gaudi memory as long as they like (stalled in the
// middle of Data frames, or not reading the replies to their Gets) do not
// hold up another peer's transfers to and from Gaudi memory: each
// connection has a staging buffer of its own besides the shared ones.
// With the shared pool alone, the other peer waited for the stalled ones'
// timeout (10 s here).
func TestTCPStalledPeersDoNotLockOthersOut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stall func(t *testing.T, addr string, key RemoteKey)
	}{
		{"stalled mid-frame", func(t *testing.T, addr string, key RemoteKey) {
			for i := range tcp.StageBuffers {
				stallMidFrame(t, addr, key.Slice(i*tcp.Chunk, tcp.Chunk).k, tcp.Chunk)
			}
		}},
		{"not reading its Gets", func(t *testing.T, addr string, key RemoteKey) {
			hog := dialFake(t, addr)
			for i := range tcp.StageBuffers {
				g := &wire.Get{Request: wire.Request{RequestID: uint64(2*i + 3), Key: key.Slice(i*(4<<20), 4<<20).k, Length: 4 << 20, Local: wire.Local{Kind: wire.LocalInline}}}
				require.NoError(t, hog.c.Send(g))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, l, _, key := gaudiOverTCP(t, Config{PeerTimeout: 10 * time.Second}, 40<<20)
			tc.stall(t, l.Addr(), key)
			time.Sleep(200 * time.Millisecond)

			peer := newEngine(t, Config{Devices: DevicesNone})
			ep, err := peer.Dial(context.Background(), "tcp", l.Addr(), WithTransport(TransportTCP))
			require.NoError(t, err)
			defer ep.Close()
			h, _ := peer.Alloc(4096, Host)
			fill(h.Bytes(), 5)
			back, _ := peer.Alloc(4096, Host)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			at := key.Slice(36<<20, 4096)
			require.NoError(t, ep.PutSync(ctx, h.All(), at), "a 4 KiB Put into Gaudi memory")
			require.NoError(t, ep.GetSync(ctx, back.All(), at), "a 4 KiB Get of Gaudi memory")
			require.Equal(t, h.Bytes(), back.Bytes())
		})
	}
}

// gaudiOverTCP is an engine (cfg, with 128 MiB of emulated device memory)
// listening on TCP, with size bytes of Gaudi memory exported.
func gaudiOverTCP(t *testing.T, cfg Config, size int) (*Engine, *Listener, *Buffer, RemoteKey) {
	t.Helper()
	cfg.Emulator.DRAMSize = 128 << 20
	e := newEngine(t, cfg)
	l, err := e.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dev, err := e.Alloc(size, Gaudi(0))
	require.NoError(t, err)
	key, err := dev.Export()
	require.NoError(t, err)
	return e, l, dev, key
}
