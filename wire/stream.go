package wire

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/racesync"
)

// StreamTransport carries frames over a byte stream (TCP, a unix stream
// socket, net.Pipe): each frame is preceded by its length as a
// little-endian uint32. It cannot carry file descriptors.
//
// A write that fails part-way through a frame breaks the sending side:
// every later Send returns the same error, matching ErrBroken (one that
// sent nothing leaves it usable). A read that fails part-way through a frame (an error, a deadline that
// expires mid-frame, a frame larger than the receive buffer, a zero
// length) leaves the stream out of step: the transport is then broken and
// every later Recv returns the same error. A deadline that expires before
// the first byte of a frame leaves it usable.
type StreamTransport struct {
	c  net.Conn
	rc syscall.RawConn // c's socket, for vectored reads (nil: none)

	wmu     sync.Mutex
	wbuf    []byte
	wbroken error
	wv      net.Buffers // writev's, consumed by the write (kept: a net.Buffers passed on escapes)
	wv2     [2][]byte   // writeFramed's two buffers
	wpfx    [4]byte     // Send's length prefix

	rmu  sync.Mutex
	rhdr [4]byte
	rbuf []byte // bytes read ahead: rbuf[rpos:rend]
	rpos int
	rend int
	// exact: how many frames more are read without reading ahead further
	// than the next Data frame's head: a large routed payload sets it to
	// exactFrames (the next payload is likely large too, and is better
	// read straight into its place than through rbuf), a small one clears
	// it, and each other frame uses one. The frames a large put sends
	// before its payload (its request, replies riding along) so leave the
	// payload to readv: read ahead, up to half of rbuf of it would be
	// copied out of rbuf instead (session 38: a 1 MiB put's server copied
	// about 64 KiB per put, 16% of its user time).
	exact  int
	iov    [][]byte     // readVec's
	iovecs []unix.Iovec // readv's, kept: a list's frame is read into 17 places and more
	// readv's call of readvFD, made once (a closure made per call would
	// be allocated per frame), its buffers and its results.
	rvFn   func(fd uintptr) bool
	rvIov  [][]byte
	rvN    int
	rvErr  error
	rp     [2][]byte // readPayload's two buffers
	broken error

	closeOnce sync.Once
	closeErr  error
}

var _ Transport = (*StreamTransport)(nil)

// NewStreamTransport returns a transport over c, which it owns.
func NewStreamTransport(c net.Conn) *StreamTransport {
	s := &StreamTransport{c: c, wbuf: make([]byte, 0, 512)}
	s.rvFn = s.readvReady
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			s.rc = rc
		}
	}
	return s
}

// streamCopyMax is the largest frame copied behind its length prefix into
// one write; larger frames go out with writev.
const streamCopyMax = 16 << 10

// Send writes the length prefix and the frame. fds must be empty.
func (s *StreamTransport) Send(frame []byte, fds []*fd.FD) error {
	if len(fds) != 0 {
		return ErrFDsNotSupported
	}
	if len(frame) == 0 || uint64(len(frame)) > math.MaxUint32 {
		return invalid("stream frame of %d bytes", len(frame))
	}
	// The prefix is the transport's (wmu held): one on this stack would
	// move to the heap, as writev keeps its vector in the transport.
	s.wmu.Lock()
	defer s.wmu.Unlock()
	binary.LittleEndian.PutUint32(s.wpfx[:], uint32(len(frame)))
	return s.writeFramedLocked(s.wpfx[:], frame, streamCopyMax)
}

// Recv reads one length-prefixed frame into buf.
func (s *StreamTransport) Recv(buf []byte) (int, []*fd.FD, error) {
	n, _, err := s.RecvRouted(buf, nil)
	return n, nil, err
}

func (s *StreamTransport) breakWith(err error) error {
	s.broken = err
	return err
}

// SetReadDeadline sets the underlying connection's read deadline.
func (s *StreamTransport) SetReadDeadline(t time.Time) error { return s.c.SetReadDeadline(t) }

// SetWriteDeadline sets the underlying connection's write deadline.
func (s *StreamTransport) SetWriteDeadline(t time.Time) error { return s.c.SetWriteDeadline(t) }

// Close closes the connection; later calls return the first result.
func (s *StreamTransport) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.c.Close() })
	return s.closeErr
}

// streamReadAhead is the read-ahead buffer: one read syscall takes in the
// frames a small exchange is made of (a request, its data, a reply);
// payloads of half of it or more are read straight into their place.
const streamReadAhead = 64 << 10

// exactFrames is how many frames after a large routed payload are read
// exactly (StreamTransport.exact): a put's request and a few replies
// riding along before its next Data frame. A stream that turns to small
// frames pays as many extra reads before reading ahead again.
const exactFrames = 4

// readFull is io.ReadFull through the read-ahead buffer.
func (s *StreamTransport) readFull(p []byte) (int, error) {
	n := copy(p, s.rbuf[s.rpos:s.rend])
	s.rpos += n
	for n < len(p) {
		rest := p[n:]
		if len(rest) >= streamReadAhead/2 {
			m, err := s.readPayload(rest)
			n += m
			if err != nil && n < len(p) {
				return n, fullErr(n, err)
			}
			continue
		}
		if s.rbuf == nil {
			s.rbuf = make([]byte, streamReadAhead)
		}
		ahead := s.rbuf
		if s.exact > 0 {
			ahead = s.rbuf[:max(len(rest), 4+dataHeadSize)]
		}
		m, err := s.read(ahead)
		c := copy(rest, s.rbuf[:m])
		s.rpos, s.rend = c, m
		n += c
		if err != nil && n < len(p) {
			return n, fullErr(n, err)
		}
	}
	return n, nil
}

// readVec fills the slices of v in order (a routed payload): the bytes
// read ahead first, then, on a socket and for a large rest, readv
// straight into them (and the next frame's prefix and head into rbuf, if
// there), else through readFull. It consumes v's slices.
func (s *StreamTransport) readVec(v [][]byte) error {
	for len(v) > 0 && s.rpos < s.rend {
		k := copy(v[0], s.rbuf[s.rpos:s.rend])
		s.rpos += k
		if v[0] = v[0][k:]; len(v[0]) == 0 {
			v = v[1:]
		}
	}
	for len(v) > 0 {
		left := 0
		for _, p := range v {
			left += len(p)
		}
		// A small rest goes through rbuf, with the frames behind it,
		// unless the stream carries large payloads (exact): then the rest
		// of one that a readv left (the socket had only part of it) is
		// read straight into its place too, not copied out of rbuf.
		if s.rc == nil || left < streamReadAhead/2 && s.exact == 0 {
			for _, p := range v {
				if _, err := s.readFull(p); err != nil {
					return err
				}
			}
			return nil
		}
		if s.rbuf == nil {
			s.rbuf = make([]byte, streamReadAhead)
		}
		// One readv takes at most maxIov buffers: a payload cut into more
		// (a list's frame over many small entries) takes several, the
		// next frame's prefix and head only with the last.
		if len(v) < maxIov {
			s.iov = append(append(s.iov[:0], v...), s.rbuf[:4+dataHeadSize])
		} else {
			s.iov = append(s.iov[:0], v[:maxIov]...)
		}
		n, err := s.readv(s.iov)
		clear(s.iov)
		if err != nil {
			return err
		}
		for len(v) > 0 && n > 0 {
			k := min(n, len(v[0]))
			n -= k
			if v[0] = v[0][k:]; len(v[0]) == 0 {
				v = v[1:]
			}
		}
		if n > 0 { // the next frame's first bytes
			s.rpos, s.rend = 0, n
		}
	}
	return nil
}

// maxIov is the most buffers one readv or writev takes (Linux's
// UIO_MAXIOV, IOV_MAX; more fail with EINVAL).
const maxIov = 1024

// readv is one readv on the socket (waiting for it to be readable).
func (s *StreamTransport) readv(iov [][]byte) (int, error) {
	s.rvIov = iov
	rerr := s.rc.Read(s.rvFn)
	n, err := s.rvN, s.rvErr
	s.rvIov, s.rvErr = nil, nil
	switch {
	case rerr != nil:
		return 0, rerr
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: s.c.LocalAddr().Network(), Source: s.c.LocalAddr(), Addr: s.c.RemoteAddr(), Err: err}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readvReady is readv's attempt on the socket's fd (syscall.RawConn.Read):
// false asks to wait until it is readable.
func (s *StreamTransport) readvReady(fd uintptr) bool {
	for {
		s.rvN, s.rvErr = s.readvFD(int(fd), s.rvIov)
		if s.rvErr == unix.EINTR {
			continue
		}
		return s.rvErr != unix.EAGAIN
	}
}

// readvFD is readv(2) into iov (unix.Readv without its allocation of
// the iovecs, which a list's frames made one of per frame: s.iovecs is
// kept; rmu held).
func (s *StreamTransport) readvFD(fd int, iov [][]byte) (int, error) {
	v := s.iovecs[:0]
	for _, b := range iov {
		if len(b) > 0 {
			e := unix.Iovec{Base: &b[0]}
			e.SetLen(len(b))
			v = append(v, e)
		}
	}
	if len(v) == 0 {
		return 0, nil
	}
	r, _, errno := unix.Syscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
	n := int(r)
	var err error
	if errno != 0 {
		n, err = 0, errno
	}
	racesync.Written(v, n)
	if n > 0 {
		racesync.Received()
	}
	clear(v) // (nothing kept reachable from here)
	s.iovecs = v[:0]
	return n, err
}

// readPayload reads into rest, a large payload's bytes, straight from
// the connection; on a socket, with one readv that also takes the next
// frame's prefix and head, if they are there, into rbuf (a stream of Data
// frames then costs one system call per frame, not two).
func (s *StreamTransport) readPayload(rest []byte) (int, error) {
	if s.rc == nil {
		return s.read(rest)
	}
	if s.rbuf == nil {
		s.rbuf = make([]byte, streamReadAhead)
	}
	s.rp = [2][]byte{rest, s.rbuf[:4+dataHeadSize]}
	n, err := s.readv(s.rp[:])
	s.rp = [2][]byte{}
	if n > len(rest) {
		s.rpos, s.rend = 0, n-len(rest)
		return len(rest), nil
	}
	return n, err
}

// read is one Read of the connection.
func (s *StreamTransport) read(p []byte) (int, error) {
	n, err := s.c.Read(p)
	if n > 0 {
		racesync.Received()
	}
	return n, err
}

// discard reads and drops n bytes.
func (s *StreamTransport) discard(n int64) error {
	c := min(n, int64(s.rend-s.rpos))
	s.rpos += int(c)
	n -= c
	if n == 0 {
		return nil
	}
	if s.rbuf == nil {
		s.rbuf = make([]byte, streamReadAhead)
	}
	for n > 0 {
		m, err := s.read(s.rbuf[:min(n, int64(len(s.rbuf)))])
		n -= int64(m)
		if err != nil && n > 0 {
			return fullErr(1, err)
		}
	}
	s.rpos, s.rend = 0, 0
	return nil
}

// fullErr is io.ReadFull's error for a read that stopped after n bytes.
func fullErr(n int, err error) error {
	if errors.Is(err, io.EOF) && n > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}
