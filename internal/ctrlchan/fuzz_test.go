package ctrlchan

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"

	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// stream is msgs as a TCP peer sends them: each frame behind its length.
func stream(t testing.TB, msgs ...wire.Message) []byte {
	var tr capture
	c := wire.NewConn(&tr, wire.ConnConfig{})
	for _, m := range msgs {
		if err := c.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	var b []byte
	for _, f := range tr.frames {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// FuzzReader feeds arbitrary bytes from the peer to a channel's reader:
// it never panics, answers the requests its path takes, and ends with a
// peer error (malformed frame, Bye, connection lost) once the peer is
// gone; Close then returns with nothing left running.
func FuzzReader(f *testing.F) {
	f.Add([]byte{})
	f.Add(stream(f, &wire.Heartbeat{}, &wire.Completion{RequestID: 7}, &wire.Invalidate{AllocID: 1, Generation: 2}))
	f.Add(stream(f, &wire.Put{Request: req(2, wire.LocalInline)}, &wire.Get{Request: req(4, wire.LocalInline)}, &wire.Bye{}))
	f.Add(stream(f, &wire.Data{RequestID: 3, Bytes: []byte("abc")}))
	f.Add(stream(f, wire.NewError(5, wire.StatusBadKey, "no"), &wire.Cancel{RequestID: 5}))
	f.Add([]byte{8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(stream(f, &wire.AppMsg{Bytes: []byte("a")}, &wire.MsgCredit{Msgs: 3, Bytes: 9}, &wire.AppMsg{}, &wire.AppMsg{Bytes: make([]byte, 300)}))
	f.Add(stream(f, &wire.AppMsg{}, &wire.AppMsg{}, &wire.AppMsg{}, &wire.AppMsg{}, &wire.AppMsg{}))
	f.Add(stream(f, &wire.MsgBell{}, &wire.AppMsg{Bytes: []byte("b")}))
	f.Add(stream(f, &wire.Heartbeat{Used: true}, &wire.Heartbeat{}, &wire.Heartbeat{Used: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		env := &dptest.Env{}
		a, raw := net.Pipe()
		p := &fakePath{}
		c := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(a), wire.ConnConfig{MaxFrame: 96 << 10}), Name: "fuzz",
			Peer: wire.Hello{Caps: wire.CapMessages | wire.CapUseReport}, MsgWindow: 4})
		p.c = c
		c.Start(p)
		go func() { // what c sends (replies, Bye)
			buf := make([]byte, 4096)
			for {
				if _, err := raw.Read(buf); err != nil {
					return
				}
			}
		}()
		_, _ = raw.Write(b)
		_ = raw.Close()
		<-c.Done()
		if err := c.Err(); !errors.Is(err, gxerr.Peer) {
			t.Fatalf("channel ended with %v, want a peer error", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		env.Wait()
		if p.failed.Load() != 1 || p.ended.Load() != 1 {
			t.Fatalf("path told %d failures, %d ends", p.failed.Load(), p.ended.Load())
		}
	})
}

// packets is msgs as a unix socket carries them: each frame behind its
// length (FuzzReaderUnix splits them again).
func packets(msgs ...wire.Message) []byte {
	var b []byte
	for _, m := range msgs {
		f, _ := wire.AppendFrame(nil, m)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// FuzzReaderUnix is FuzzReader on a unix socket whose messages go through
// rings: arbitrary packets, each with as many descriptors (a memfd of
// memSize bytes, 0 to 3 of them) as its header's fd count says, reach the
// reader, ring grants and bells among them. It never panics, ends with a
// peer error once the peer is gone, and Close leaves nothing running or
// open (TestMain).
func FuzzReaderUnix(f *testing.F) {
	ring := ringSize(2, wire.MaxAppMsg)
	f.Add(packets(&wire.MsgBell{}, &wire.AppMsg{Bytes: []byte("b")}), ringHdr+ring)
	f.Add(packets(&wire.MsgRing{Msgs: 2, Bytes: 1 << 20, Size: ring}, &wire.MsgBell{}, &wire.MsgCredit{Msgs: 1}), ringHdr+ring)
	f.Add(packets(&wire.Completion{RequestID: 3}, &wire.ImportReply{RequestID: 5, AllocID: 1, Generation: 1, Kind: wire.FDMemfd, Size: 4096},
		&wire.MsgRing{Msgs: 2, Bytes: 1 << 20, Size: ring}), uint64(4096))
	f.Fuzz(func(t *testing.T, b []byte, memSize uint64) {
		env := &dptest.Env{}
		a, raw := unixConns(t)
		p := &fakePath{handle: func(wire.Message) (bool, error) { return false, nil }}
		c := New(Config{Env: env, Conn: wire.NewConn(a, wire.ConnConfig{}), Name: "fuzz", Peer: ringPeer, MsgRing: true, MsgWindow: 2, MsgWindowBytes: 1})
		p.c = c
		c.Start(p)
		peer := wire.NewConn(raw, wire.ConnConfig{})
		read := make(chan struct{})
		go func() { // what c sends (its grant, replies, Bye)
			defer close(read)
			for {
				f, err := peer.Recv(context.Background())
				if err != nil {
					return
				}
				_ = f.CloseFDs()
			}
		}()
		mem, err := ipc.NewShared(int(memSize%(2<<20))+1, "fuzz")
		if err != nil {
			t.Fatal(err)
		}
		for len(b) >= 4 {
			n := min(int(binary.LittleEndian.Uint32(b)), len(b)-4)
			pkt := b[4 : 4+n]
			b = b[4+n:]
			var fds []*fd.FD
			if len(pkt) >= 14 {
				for range binary.LittleEndian.Uint16(pkt[12:]) % 4 {
					fds = append(fds, mem.FD())
				}
			}
			if len(pkt) > 0 && raw.Send(pkt, fds) != nil {
				break
			}
		}
		_ = peer.Close()
		<-c.Done()
		if err := c.Err(); !errors.Is(err, gxerr.Peer) {
			t.Fatalf("channel ended with %v, want a peer error", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		<-read
		if err := mem.Close(); err != nil {
			t.Fatal(err)
		}
		env.Wait()
	})
}
