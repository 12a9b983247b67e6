package engine

import (
	"context"
	"testing"

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
	e := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 64 << 20}})
	l, err := e.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dev, err := e.Alloc(4<<20, Gaudi(0))
	require.NoError(t, err)
	key, err := dev.Export()
	require.NoError(t, err)
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
