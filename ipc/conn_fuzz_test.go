package ipc

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/testutil"
)

// FuzzConnRecv: whatever one message a peer sends (any payload, 0 to 40
// descriptors against a limit of 16, sent raw so that Send's own limit
// does not apply) into whatever buffer, Recv returns the whole message
// with every descriptor, or the error its rules give (ErrTooManyFDs, then
// ErrTruncated, then io.EOF for an empty message) with none; every
// descriptor it does not return is closed, and the connection still
// carries the next message. An empty buffer is refused (ErrInvalid) and
// the message left for the next Recv.
func FuzzConnRecv(f *testing.F) {
	f.Add([]byte("hello"), uint8(0), uint16(64))
	f.Add([]byte("hello"), uint8(3), uint16(64))
	f.Add([]byte("hello"), uint8(16), uint16(5))
	f.Add([]byte("hello"), uint8(17), uint16(64))
	f.Add([]byte("hello"), uint8(40), uint16(2))
	f.Add([]byte("hello"), uint8(2), uint16(4))
	f.Add([]byte{}, uint8(2), uint16(8))
	f.Add([]byte{}, uint8(0), uint16(0))
	f.Add([]byte("0"), uint8(2), uint16(0)) // was received into the empty buffer: n 1 > len(buf)
	s, c := pair(f, Config{})
	sh, err := NewShared(4096, "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = sh.Close() })
	f.Fuzz(func(t *testing.T, payload []byte, nfds uint8, bufLen uint16) {
		payload = payload[:min(len(payload), 32<<10)] // within the socket's send buffer
		n := int(nfds % 41)
		before := testutil.OpenFDs()
		raws := make([]int, n)
		for i := range raws {
			raws[i] = sh.FD().Int()
		}
		var oob []byte
		if n > 0 {
			oob = unix.UnixRights(raws...)
			if len(payload) == 0 {
				payload = []byte{0} // what sendmsg sends then (syscall.SendmsgN: one dummy byte)
			}
		}
		if _, _, err := c.uc.WriteMsgUnix(payload, oob, nil); err != nil {
			t.Fatalf("send: %v", err)
		}
		buf := make([]byte, bufLen)
		if bufLen == 0 {
			if got, fds, err := s.Recv(buf); !errors.Is(err, ErrInvalid) || got != 0 || fds != nil {
				t.Fatalf("empty buffer: %d bytes, %d fds, %v", got, len(fds), err)
			}
			buf = make([]byte, 64<<10) // the message is still there
		}
		got, fds, err := s.Recv(buf)
		var want error
		switch {
		case n > s.MaxFDsPerMsg():
			want = ErrTooManyFDs
		case len(payload) > len(buf):
			want = ErrTruncated
		case len(payload) == 0:
			want = io.EOF
		}
		switch {
		case want == nil && err != nil:
			t.Fatalf("%d bytes with %d fds into %d: %v", len(payload), n, bufLen, err)
		case want == nil:
			if !bytes.Equal(buf[:got], payload) || len(fds) != n {
				t.Fatalf("received %d bytes and %d fds, sent %d and %d", got, len(fds), len(payload), n)
			}
		case !errors.Is(err, want):
			t.Fatalf("%d bytes with %d fds into %d: %v, want %v", len(payload), n, bufLen, err, want)
		case fds != nil || got != 0:
			t.Fatalf("error %v with %d bytes and %d fds", err, got, len(fds))
		}
		for _, f := range fds {
			if _, _, err := sealedMemfd(f, "check"); err != nil {
				t.Errorf("received descriptor: %v", err)
			}
			_ = f.Close()
		}
		if leaked := testutil.LeakedFDs(before); len(leaked) > 0 {
			t.Fatalf("descriptors left open: %v", leaked)
		}
		if err := c.Send([]byte("next"), []*fd.FD{sh.FD()}); err != nil {
			t.Fatal(err)
		}
		got, fds, err = s.Recv(make([]byte, 8))
		if err != nil || got != 4 || len(fds) != 1 {
			t.Fatalf("next message: %d bytes, %d fds, %v", got, len(fds), err)
		}
		_ = fds[0].Close()
	})
}
