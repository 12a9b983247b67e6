package ctrlchan

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"

	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/gxerr"
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
	f.Fuzz(func(t *testing.T, b []byte) {
		env := &dptest.Env{}
		a, raw := net.Pipe()
		p := &fakePath{}
		c := New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(a), wire.ConnConfig{MaxFrame: 96 << 10}), Name: "fuzz",
			Peer: wire.Hello{Caps: wire.CapMessages}, MsgWindow: 4})
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
