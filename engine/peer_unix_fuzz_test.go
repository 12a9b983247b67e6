package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// fuzzPackets is msgs as FuzzPeerPackets reads its input: each frame
// behind a 2-byte length.
func fuzzPackets(t testing.TB, msgs ...wire.Message) []byte {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		fr, err := wire.AppendFrame(nil, m)
		require.NoError(t, err)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(fr)))
		b = append(b, fr...)
	}
	return b
}

// fuzzPacketFDs is the most descriptors FuzzPeerPackets attaches to one
// message (each a sealed 4 KiB memfd, as an honest peer sends).
const fuzzPacketFDs = 4

// FuzzPeerPackets is FuzzPeerStream over a unix socket: a handshaken
// peer sends the engine arbitrary messages, each with as many sealed
// memfds as its header announces (up to fuzzPacketFDs), then hangs up.
// The engine recovers no panic, drops the endpoint, leaves no descriptor
// of it open, and goes on serving another peer.
func FuzzPeerPackets(f *testing.F) {
	e := newEngine(f, Config{Emulator: EmulatorConfig{DRAMSize: 128 << 20}})
	l, err := e.Listen("unix", filepath.Join(f.TempDir(), "e.sock"))
	require.NoError(f, err)
	host, err := e.Alloc(1<<20, Host)
	require.NoError(f, err)
	hk, err := host.Export()
	require.NoError(f, err)
	dev, err := e.Alloc(4<<20, Gaudi(0))
	require.NoError(f, err)
	dk, err := dev.Export()
	require.NoError(f, err)
	theirs, err := e.Alloc(8192, Host)
	require.NoError(f, err)
	tk, err := theirs.Export()
	require.NoError(f, err)
	other := newEngine(f, Config{Devices: DevicesNone})
	ep, err := other.Dial(context.Background(), "unix", l.Addr())
	require.NoError(f, err)
	f.Cleanup(func() { _ = ep.Close() })
	src, err := other.Alloc(8192, Host)
	require.NoError(f, err)
	back, err := other.Alloc(8192, Host)
	require.NoError(f, err)
	// Honest imports first: what exporting a buffer creates for its
	// importers (its validity memfd, a DMA-BUF) lives with the buffer.
	for _, k := range []RemoteKey{hk, dk, tk} {
		require.NoError(f, ep.GetSync(context.Background(), back.Slice(0, 4096), k.Slice(0, 4096)))
	}

	req := func(id uint64, k RemoteKey, n uint64) wire.Request {
		return wire.Request{RequestID: id, Key: k.k, Length: n, Local: wire.Local{Kind: wire.LocalKey, Key: tk.k}}
	}
	f.Add([]byte{})
	f.Add(fuzzPackets(f, &wire.ImportRequest{RequestID: 1, Key: hk.k}, &wire.ImportRequest{RequestID: 3, Key: dk.k}, &wire.Heartbeat{}))
	f.Add(fuzzPackets(f, &wire.Put{Request: req(5, hk, 4096)}, &wire.Get{Request: req(7, dk, 8192)}, &wire.Cancel{RequestID: 7}))
	f.Add(fuzzPackets(f, &wire.Invalidate{AllocID: hk.k.AllocID, Generation: hk.k.Generation}, &wire.AppMsg{Bytes: []byte("hi")}, &wire.Bye{}))
	f.Add(fuzzPackets(f, &wire.MsgRing{Msgs: 4, Bytes: 4096, Size: 8192}, &wire.MsgBell{}, &wire.MsgCredit{Msgs: 1, Bytes: 1}))
	f.Add(fuzzPackets(f, &wire.ImportReply{RequestID: 2, AllocID: 1, Generation: 1, Kind: wire.FDMemfd, Size: 4096}))

	ipcStats := func() TransportStats {
		for _, s := range e.Stats().Transports {
			if s.Transport == TransportIPC {
				return s
			}
		}
		return TransportStats{}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		base := ipcStats().Endpoints
		fdsBefore := testutil.OpenFDs()
		p := dialRaw(t, l.Addr(), rawHello(uint32(os.Getpid())))
		var shared []*ipc.Shared
		for len(in) >= 2 {
			n := min(int(binary.LittleEndian.Uint16(in)), len(in)-2)
			pkt := in[2 : 2+n]
			in = in[2+n:]
			if n == 0 {
				continue
			}
			var fds []*fd.FD
			if len(pkt) >= wire.HeaderSize {
				for range min(int(binary.LittleEndian.Uint16(pkt[12:])), fuzzPacketFDs) {
					s, err := ipc.NewShared(4096, "fuzz")
					if err != nil {
						t.Fatal(err)
					}
					shared = append(shared, s)
					fds = append(fds, s.FD())
				}
			}
			if err := p.ic.Send(pkt, fds); err != nil {
				break // the engine hung up
			}
		}
		for _, s := range shared { // the engine has its own copies
			_ = s.Close()
		}
		// Read until the engine is quiet for a moment (so that it serves
		// the requests; the pause decides only how far it gets), then
		// hang up.
		buf := make([]byte, 256<<10)
		end := time.Now().Add(20 * time.Second)
		for {
			_ = p.ic.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			_, got, err := p.ic.Recv(buf)
			for _, d := range got {
				_ = d.Close()
			}
			var ne net.Error
			if err != nil && (!errors.As(err, &ne) || !ne.Timeout()) && !errors.Is(err, ipc.ErrTruncated) {
				break // the engine closed the connection
			}
			if err != nil && time.Now().After(end) {
				t.Fatal("the engine never went quiet")
			}
			if err != nil && errors.As(err, &ne) && ne.Timeout() {
				break
			}
		}
		_ = p.c.Close()
		// The engine drops the endpoint and what it held.
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
			leaked := testutil.LeakedFDs(fdsBefore)
			if ipcStats().Endpoints == base && len(leaked) == 0 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("after the peer hung up: %d endpoints (%d before), descriptors left open: %v",
					ipcStats().Endpoints, base, leaked)
			}
		}
		if n := e.Stats().Panics; n != 0 {
			t.Fatalf("%d panics recovered", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		fill(src.Bytes(), uint64(len(shared)))
		if err := ep.PutSync(ctx, src.All(), tk); err != nil {
			t.Fatalf("another peer's Put: %v", err)
		}
		if err := ep.GetSync(ctx, back.All(), tk); err != nil {
			t.Fatalf("another peer's Get: %v", err)
		}
		require.Equal(t, src.Bytes(), back.Bytes(), "another peer's Get")
	})
}
