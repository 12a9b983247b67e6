package handshake

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// Fuzz modes (the first argument's bits).
const (
	fuzzUnix   = 1 << 0 // a unix socket (else TCP)
	fuzzSecret = 1 << 1 // TCP: both sides hold a cluster secret
	fuzzFD     = 1 << 2 // unix: attach a pipe's write end to the first message
)

var fuzzSecretBytes = []byte("the fuzzed cluster's secret, 32B")

// fuzzMessages cuts data into the messages of a unix socket: each is a
// u16 length and that many bytes (empty ones skipped).
func fuzzMessages(data []byte) [][]byte {
	var msgs [][]byte
	for len(data) >= 2 {
		n := min(int(binary.LittleEndian.Uint16(data)), len(data)-2)
		if n > 0 {
			msgs = append(msgs, data[2:2+n])
		}
		data = data[2+n:]
	}
	return msgs
}

// fuzzSeeds are the frames of a real exchange, as the fuzzers take them:
// length-prefixed (a TCP stream) and u16-prefixed (unix messages).
func fuzzSeeds(f *testing.F, msgs ...wire.Message) (stream, seq []byte) {
	for _, m := range msgs {
		fr, err := wire.AppendFrame(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		stream = append(binary.LittleEndian.AppendUint32(stream, uint32(len(fr))), fr...)
		seq = append(binary.LittleEndian.AppendUint16(seq, uint16(len(fr))), fr...)
	}
	return stream, seq
}

// fuzzPipe returns a nonblocking pipe: its read end (raw, closed at the
// test's end) and its write end as an FD.
func fuzzPipe(t *testing.T) (int, *fd.FD) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(p[0]) })
	w, err := fd.New(p[1])
	if err != nil {
		t.Fatal(err)
	}
	return p[0], w
}

// checkPipeClosed fails the test unless every write end of the pipe
// whose read end is r is closed (a descriptor passed to the peer that
// was leaked keeps one open).
func checkPipeClosed(t *testing.T, r int) {
	var b [1]byte
	if n, err := unix.Read(r, b[:]); n != 0 || err != nil {
		t.Fatalf("a descriptor passed with the peer's frames is still open (read: %d, %v)", n, err)
	}
}

// fuzzTCPDials counts FuzzListen's TCP inputs.
var fuzzTCPDials atomic.Uint64

// closeReset closes a TCP connection with a reset (SO_LINGER 0), so that
// it leaves no TIME_WAIT behind: a fuzzer opening connections for every
// input would run out of ports within a minute. The bytes written before
// still reach the peer.
func closeReset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// fuzzHello is a valid Hello of this process (its pid and uid pass the
// unix socket's credential check).
func fuzzHello(caps wire.Caps) wire.Hello {
	return wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Caps: caps,
		PID: uint32(os.Getpid()), UID: uint32(os.Getuid()), EngineID: wire.EngineID{7}, Name: "fuzz"}
}

// FuzzListen plays a hostile dialer: arbitrary bytes (TCP) or messages
// (unix, with a descriptor attached to the first) as the first a
// listener receives on a connection. Nothing may panic or leak (a
// passed descriptor is closed once the handshake ends), a listener with
// a cluster secret never makes an endpoint for the fuzzer, and a real
// dialer still gets in afterwards.
func FuzzListen(f *testing.F) {
	hello := fuzzHello(wire.CapFDPassing | wire.CapSharedHost)
	authHello := fuzzHello(wire.CapAuth | wire.CapInlineData)
	stream, seq := fuzzSeeds(f, &hello, &wire.Bye{})
	f.Add(byte(0), stream)
	f.Add(byte(fuzzUnix), seq)
	f.Add(byte(fuzzUnix|fuzzFD), seq)
	stream, _ = fuzzSeeds(f, &authHello, &wire.Auth{Nonce: [32]byte{1}, MAC: [32]byte{2}})
	f.Add(byte(fuzzSecret), stream)
	lane := fuzzHello(wire.CapLane)
	stream, seq = fuzzSeeds(f, &lane)
	f.Add(byte(0), stream)
	f.Add(byte(fuzzUnix|fuzzFD), seq)
	f.Add(byte(0), []byte{})
	f.Add(byte(0), []byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, mode byte, data []byte) {
		network, addr := "tcp", "127.0.0.1:0"
		if mode&fuzzUnix != 0 {
			network, addr = "unix", filepath.Join(t.TempDir(), "l.sock")
		}
		var secret []byte
		if mode&fuzzSecret != 0 && network == "tcp" {
			secret = fuzzSecretBytes
		}
		ls, ds := newSide(t, secret, false), newSide(t, secret, false)
		l, err := Listen(ListenConfig[*peer]{Local: ls.local, Network: network, Addr: addr, MaxPeers: 4, Connect: ls.connect})
		if err != nil {
			t.Fatal(err)
		}
		closed := false
		defer func() {
			if !closed {
				_ = l.Close()
			}
		}()
		pipeR := -1
		if network == "tcp" {
			c, err := net.Dial("tcp", l.Addr())
			if err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write(data)
			closeReset(c)
		} else {
			c, err := ipc.Dial(context.Background(), l.Addr(), ipc.Config{})
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range fuzzMessages(data) {
				var fds []*fd.FD
				if i == 0 && mode&fuzzFD != 0 {
					r, w := fuzzPipe(t)
					pipeR, fds = r, []*fd.FD{w}
				}
				_ = c.Send(m, fds)
				for _, x := range fds {
					_ = x.Close()
				}
			}
			_ = c.Close()
		}
		// A real dialer still gets in (over TCP on every 16th input only:
		// its connection ends in TIME_WAIT, and a fuzzer making one per
		// input ran the machine out of ports).
		if network == "unix" || fuzzTCPDials.Add(1)%16 == 1 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := Dial(ctx, DialConfig{Local: ds.local, Network: network, Addr: l.Addr(), Want: datapath.KindTCP}, ds.connect)
			if err != nil {
				t.Fatalf("a real dialer after the fuzzer's connection: %v", err)
			}
			if p.hello.EngineID != ls.local.Hello.EngineID {
				t.Fatalf("dialed engine %v, want %v", p.hello.EngineID, ls.local.Hello.EngineID)
			}
		}
		closed = true
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		for _, a := range ls.all() {
			if secret != nil && a.hello.EngineID != ds.local.Hello.EngineID {
				t.Fatalf("the listener made an endpoint for an unauthenticated peer: %+v", a.hello)
			}
			a.Fail(errors.New("test over"))
		}
		if pipeR >= 0 {
			checkPipeClosed(t, pipeR)
		}
	})
}

// FuzzDial plays a hostile listener: it takes the dialer's Hello, then
// answers with arbitrary bytes (TCP) or messages (unix, with a descriptor
// attached to the first) and closes. Dial must return without panicking
// or leaking; a dialer with a cluster secret never succeeds (the fuzzer
// cannot prove the secret).
func FuzzDial(f *testing.F) {
	ack := wire.HelloAck{Hello: fuzzHello(wire.CapFDPassing | wire.CapSharedHost), Version: wire.Version, Accepted: wire.CapFDPassing}
	stream, seq := fuzzSeeds(f, &ack)
	f.Add(byte(0), stream)
	f.Add(byte(fuzzUnix), seq)
	f.Add(byte(fuzzUnix|fuzzFD), seq)
	stream, _ = fuzzSeeds(f, &wire.Auth{Nonce: [32]byte{1}}, &wire.Auth{MAC: [32]byte{2}}, &ack)
	f.Add(byte(fuzzSecret), stream)
	stream, seq = fuzzSeeds(f, wire.NewError(0, wire.StatusNoResources, "full"))
	f.Add(byte(0), stream)
	f.Add(byte(fuzzUnix|fuzzFD), seq)
	f.Fuzz(func(t *testing.T, mode byte, data []byte) {
		var secret []byte
		if mode&fuzzSecret != 0 && mode&fuzzUnix == 0 {
			secret = fuzzSecretBytes
		}
		ds := newSide(t, secret, false)
		network := "tcp"
		var (
			addr  string
			serve func()
			stop  func()
			pipeR = -1
		)
		if mode&fuzzUnix == 0 {
			nl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr, stop = nl.Addr().String(), func() { _ = nl.Close() }
			serve = func() {
				c, err := nl.Accept()
				if err != nil {
					return
				}
				defer closeReset(c)
				st := wire.NewStreamTransport(c)
				_, _, _ = st.Recv(make([]byte, 4096)) // the Hello
				_, _ = c.Write(data)
			}
		} else {
			network = "unix"
			il, err := ipc.Listen(filepath.Join(t.TempDir(), "l.sock"), ipc.Config{})
			if err != nil {
				t.Fatal(err)
			}
			addr, stop = il.Path(), func() { _ = il.Close() }
			var fds []*fd.FD
			if mode&fuzzFD != 0 {
				r, w := fuzzPipe(t)
				pipeR, fds = r, []*fd.FD{w}
			}
			serve = func() {
				defer func() {
					for _, x := range fds {
						_ = x.Close()
					}
				}()
				c, err := il.Accept(context.Background())
				if err != nil {
					return
				}
				defer c.Close()
				_, _, _ = c.Recv(make([]byte, 4096)) // the Hello
				for i, m := range fuzzMessages(data) {
					first := fds
					if i > 0 {
						first = nil
					}
					_ = c.Send(m, first)
				}
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			serve()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := Dial(ctx, DialConfig{Local: ds.local, Network: network, Addr: addr, Want: datapath.KindTCP}, ds.connect)
		stop()
		<-done
		if err == nil {
			if secret != nil {
				t.Fatalf("a dialer with a cluster secret accepted a listener that never proved it: %+v", p.hello)
			}
			p.Fail(errors.New("test over"))
		}
		if pipeR >= 0 {
			checkPipeClosed(t, pipeR)
		}
	})
}
