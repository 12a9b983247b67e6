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
	"golang.org/x/sys/unix"

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
// message.
const fuzzPacketFDs = 4

// fuzzFD is a descriptor of kind k for FuzzPeerPackets: 0 a sealed 4 KiB
// memfd (what an honest peer sends), 1 an unsealed one (it could shrink
// under a mapping), 2 a sealed one of 8 bytes, 3 a pipe.
func fuzzFD(t *testing.T, k byte) *fd.FD {
	var raw int
	switch k {
	case 0, 2:
		s, err := ipc.NewShared(map[byte]int{0: 4096, 2: 8}[k], "fuzz")
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.FD().Dup()
		_ = s.Close()
		if err != nil {
			t.Fatal(err)
		}
		return d
	case 1:
		m, err := unix.MemfdCreate("fuzz", unix.MFD_CLOEXEC)
		if err == nil {
			raw, err = m, unix.Ftruncate(m, 4096)
		}
		if err != nil {
			t.Fatal(err)
		}
	default:
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		_ = unix.Close(p[1])
		raw = p[0]
	}
	d, err := fd.New(raw)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// FuzzPeerPackets is FuzzPeerStream over a unix socket: a handshaken
// peer sends the engine arbitrary messages, each with as many sealed
// memfds as its header announces (up to fuzzPacketFDs), then hangs up.
// The engine recovers no panic, drops the endpoint, leaves no descriptor
// of it open, and goes on serving another peer.
func FuzzPeerPackets(f *testing.F) {
	x := newPeerFuzzRig(f, "unix", filepath.Join(f.TempDir(), "e.sock"))
	e, l, hk, dk, tk, ep, src, back := x.e, x.l, x.hk, x.dk, x.tk, x.ep, x.src, x.back
	// Honest imports first: what exporting a buffer creates for its
	// importers (its validity memfd, a DMA-BUF) lives with the buffer.
	for _, k := range []RemoteKey{hk, dk, tk} {
		require.NoError(f, ep.GetSync(context.Background(), back.Slice(0, 4096), k.Slice(0, 4096)))
	}

	// The peer's engine id is fixed, so that inputs can name its own
	// memory (a LocalKey the engine imports from it, and the
	// ImportReply that answers the engine's ImportRequest, id 2).
	hello := rawHello(uint32(os.Getpid()))
	hello.EngineID = wire.EngineID{0xf0, 0x22}
	mine := wire.RemoteKey{Owner: hello.EngineID, OwnerPID: hello.PID, OwnerPIDNS: hello.PIDNamespace, AllocID: 9, Generation: 1,
		MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead | wire.KeyWrite, Length: 4096, GrantLen: 4096, Len: 4096}
	req := func(id uint64, k RemoteKey, n uint64) wire.Request {
		return wire.Request{RequestID: id, Key: k.k, Length: n, Local: wire.Local{Kind: wire.LocalKey, Key: tk.k}}
	}
	own := func(id uint64, k RemoteKey) wire.Request {
		return wire.Request{RequestID: id, Key: k.k, Length: 4096, Local: wire.Local{Kind: wire.LocalKey, Key: mine}}
	}
	f.Add([]byte{})
	f.Add(fuzzPackets(f, &wire.ImportRequest{RequestID: 1, Key: hk.k}, &wire.ImportRequest{RequestID: 3, Key: dk.k}, &wire.Heartbeat{}))
	f.Add(fuzzPackets(f, &wire.Put{Request: req(5, hk, 4096)}, &wire.Get{Request: req(7, dk, 8192)}, &wire.Cancel{RequestID: 7}))
	f.Add(fuzzPackets(f, &wire.Invalidate{AllocID: hk.k.AllocID, Generation: hk.k.Generation}, &wire.AppMsg{Bytes: []byte("hi")}, &wire.Bye{}))
	f.Add(fuzzPackets(f, &wire.MsgRing{Msgs: 4, Bytes: 4096, Size: 8192}, &wire.MsgBell{}, &wire.MsgCredit{Msgs: 1, Bytes: 1}))
	f.Add(fuzzPackets(f, &wire.ImportReply{RequestID: 2, AllocID: 1, Generation: 1, Kind: wire.FDMemfd, Size: 4096}))
	reply := &wire.ImportReply{RequestID: 2, AllocID: mine.AllocID, Generation: mine.Generation, Kind: wire.FDMemfd, Size: 4096}
	f.Add(fuzzPackets(f, &wire.Put{Request: own(1, hk.Slice(0, 4096))}, reply))
	f.Add(fuzzPackets(f, &wire.Get{Request: own(1, dk.Slice(4096, 4096))}, reply, &wire.Put{Request: own(3, hk.Slice(8192, 4096))}))

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
		p := dialRaw(t, l.Addr(), hello)
		buf := make([]byte, 256<<10)
		// drain reads what the engine sent until it is quiet for d (the
		// pause decides only how far the engine gets: an ImportReply the
		// input sends after a request goes out after the ImportRequest
		// that request made); false once the engine hung up.
		drain := func(d time.Duration) bool {
			for end := time.Now().Add(20 * time.Second); ; {
				_ = p.ic.SetReadDeadline(time.Now().Add(d))
				_, got, err := p.ic.Recv(buf)
				for _, f := range got {
					_ = f.Close()
				}
				var ne net.Error
				switch {
				case err == nil, errors.Is(err, ipc.ErrTruncated), errors.Is(err, ipc.ErrTooManyFDs):
				case errors.As(err, &ne) && ne.Timeout():
					return true
				default:
					return false // the engine closed the connection
				}
				if time.Now().After(end) {
					t.Fatal("the engine never went quiet")
				}
			}
		}
		var sent []*fd.FD
		for len(in) >= 2 {
			n := min(int(binary.LittleEndian.Uint16(in)), len(in)-2)
			pkt := in[2 : 2+n]
			in = in[2+n:]
			if n == 0 {
				continue
			}
			var fds []*fd.FD
			if len(pkt) >= wire.HeaderSize {
				// As many as the header announces, of the kinds the
				// message's last byte picks (2 bits each).
				kinds := pkt[len(pkt)-1]
				for i := range min(int(binary.LittleEndian.Uint16(pkt[12:])), fuzzPacketFDs) {
					fds = append(fds, fuzzFD(t, kinds>>(2*i)&3))
				}
				sent = append(sent, fds...)
			}
			if err := p.ic.Send(pkt, fds); err != nil || !drain(2*time.Millisecond) {
				break // the engine hung up
			}
		}
		for _, d := range sent { // the engine has its own copies
			_ = d.Close()
		}
		drain(20 * time.Millisecond)
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
		fill(src.Bytes(), uint64(len(sent)))
		if err := ep.PutSync(ctx, src.All(), tk); err != nil {
			t.Fatalf("another peer's Put: %v", err)
		}
		if err := ep.GetSync(ctx, back.All(), tk); err != nil {
			t.Fatalf("another peer's Get: %v", err)
		}
		require.Equal(t, src.Bytes(), back.Bytes(), "another peer's Get")
	})
}
