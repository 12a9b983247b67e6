package tcp

import (
	"io"
	"net"
	"runtime"
	"sync"
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

	// One spinning Read at a time (a stream has one reader): its state
	// lives here and rc.Read is given look, bound once, so that a Read
	// allocates nothing (a closure over its locals would put each on the
	// heap, at every frame header and reply read).
	mu   sync.Mutex
	r    spinRead
	look func(fd uintptr) bool
}

// spinRead is a spinning Read's state: the buffer, what the last read
// returned, the window's end and the looks since the clock was read.
type spinRead struct {
	p     []byte
	n     int
	err   error
	until time.Time
	looks int
	spin  time.Duration
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
	s := &spinConn{Conn: c, rc: rc, spin: spin, oneP: runtime.GOMAXPROCS(0) == 1}
	s.look = s.r.look
	return s
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
	if s.oneP {
		// Yield once before the first look: this reader has just handled
		// a frame (landed bytes that another goroutine of this process,
		// sharing its one P, polls for), or the socket was drained; a
		// read now would most likely find nothing and delay that
		// goroutine by a system call. With more Ps that goroutine runs on
		// another, and a yield would wake an idle P's thread.
		runtime.Gosched()
	}
	s.mu.Lock()
	s.r = spinRead{p: p, spin: s.spin}
	rerr := s.rc.Read(s.look)
	n, err := s.r.n, s.r.err
	s.r = spinRead{}
	s.mu.Unlock()
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

// look reads from the socket until it gets bytes or an error (true), or
// the spin window ends with nothing to read (false: rc.Read then waits
// in the netpoller and looks again).
func (r *spinRead) look(fd uintptr) bool {
	for {
		r.n, r.err = syscall.Read(int(fd), r.p)
		switch {
		case r.err == syscall.EINTR:
			continue
		case r.err == syscall.EAGAIN:
			// The clock is read at the first empty look and then every
			// spinClockEvery looks (a read costs 50-100 ns in a VM, as
			// much as the rest of a look without the system call): the
			// window may run over by as many.
			if r.looks%spinClockEvery == 0 {
				now := time.Now()
				if r.until.IsZero() {
					r.until = now.Add(r.spin)
				} else if !now.Before(r.until) {
					r.until, r.looks = now.Add(r.spin), 0 // spin again after the next wakeup
					return false
				}
			}
			r.looks++
			// Let the process's other goroutines run (the one polling
			// for the data this reader lands, a writer): with one P, a
			// spin that never yields starves them.
			runtime.Gosched()
			continue
		}
		return true
	}
}
