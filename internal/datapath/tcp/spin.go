package tcp

import (
	"io"
	"net"
	"runtime"
	"syscall"
	"time"
)

// spinConn reads from a socket by polling it for up to spin before
// parking in the Go netpoller: a peer's answer that comes within the
// window is read without the wakeup latency of a parked goroutine (the
// cost of a busy-polling receiver, as RDMA and UCX's TCP transport poll).
type spinConn struct {
	net.Conn
	rc   syscall.RawConn
	spin time.Duration
	oneP bool // the process had one P when the connection was made
}

// SpinConn wraps c so that reads poll the socket for up to spin before
// waiting; it returns c itself when spin <= 0 or c has no raw socket.
// Deadlines still apply to the wait.
func SpinConn(c net.Conn, spin time.Duration) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok || spin <= 0 {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &spinConn{Conn: c, rc: rc, spin: spin, oneP: runtime.GOMAXPROCS(0) == 1}
}

// SyscallConn is the socket's (syscall.Conn): wire.StreamTransport reads
// large payloads with readv through it, without spinning (a bulk read).
func (s *spinConn) SyscallConn() (syscall.RawConn, error) { return s.rc, nil }

// WriteBuffers writes v with writev on the socket (wire.BuffersWriter):
// the wrapper would hide it from net.Buffers.WriteTo.
func (s *spinConn) WriteBuffers(v *net.Buffers) (int64, error) { return v.WriteTo(s.Conn) }

// spinMaxRead: only reads this small spin (a frame's header or a small
// message: the wait a latency-bound exchange is made of). A bulk read
// parks at once; spinning through a stream's gaps costs it bandwidth.
const spinMaxRead = 64 << 10

// spinClockEvery is how many empty looks a spinning Read makes per clock
// reading.
const spinClockEvery = 8

func (s *spinConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) > spinMaxRead {
		return s.Conn.Read(p)
	}
	var (
		n     int
		err   error
		until time.Time
		looks int
	)
	if s.oneP {
		// Yield once before the first look: this reader has just handled
		// a frame (landed bytes that another goroutine of this process,
		// sharing its one P, polls for), or the socket was drained; a
		// read now would most likely find nothing and delay that
		// goroutine by a system call. With more Ps that goroutine runs on
		// another, and a yield would wake an idle P's thread.
		runtime.Gosched()
	}
	rerr := s.rc.Read(func(fd uintptr) bool {
		for {
			n, err = syscall.Read(int(fd), p)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				// The clock is read at the first empty look and then
				// every spinClockEvery looks (a read costs 50-100 ns in
				// a VM, as much as the rest of a look without the
				// system call): the window may run over by as many.
				if looks%spinClockEvery == 0 {
					now := time.Now()
					if until.IsZero() {
						until = now.Add(s.spin)
					} else if !now.Before(until) {
						until, looks = now.Add(s.spin), 0 // spin again after the next wakeup
						return false
					}
				}
				looks++
				// Let the process's other goroutines run (the one
				// polling for the data this reader lands, a writer):
				// with one P, a spin that never yields starves them.
				runtime.Gosched()
				continue
			}
			return true
		}
	})
	if rerr != nil {
		return 0, rerr
	}
	if err != nil {
		if n < 0 {
			n = 0
		}
		return n, &net.OpError{Op: "read", Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}
