package ipc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/racesync"
)

// Conn is a connected unix SOCK_SEQPACKET socket whose peer's credentials
// were checked. Each Send is one message (a wire frame) with optional
// descriptors (SCM_RIGHTS); each Recv returns one message. It implements
// wire.Transport.
//
// Blocking calls wait in the Go netpoller (no OS thread is parked), and
// Close unblocks them. Send may be called from several goroutines (each
// message goes out whole); Recv from one at a time.
type Conn struct {
	uc     *net.UnixConn
	peer   Cred
	maxFDs int
	log    zerolog.Logger

	rmu sync.Mutex
	oob []byte

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

func newConn(uc *net.UnixConn, cfg Config, side string) (*Conn, error) {
	cred, err := peerCred(uc)
	if err != nil {
		_ = uc.Close()
		return nil, fmt.Errorf("ipc: %s: %w", side, err)
	}
	log := cfg.Logger.With().Str("component", "ipc").Uint32("peer_pid", cred.PID).Uint32("peer_uid", cred.UID).Logger()
	if !cfg.allowed(cred.UID) {
		_ = uc.Close()
		e := &PeerRefusedError{Peer: cred, Side: side, Reason: "uid not allowed"}
		log.Warn().Str("side", side).Uint32("peer_gid", cred.GID).Msg("ipc: peer refused: uid not allowed")
		return nil, e
	}
	return &Conn{uc: uc, peer: cred, maxFDs: cfg.MaxFDsPerMsg, log: log,
		oob: make([]byte, unix.CmsgSpace(4*cfg.MaxFDsPerMsg))}, nil
}

// Peer returns the peer's credentials (SO_PEERCRED).
func (c *Conn) Peer() Cred { return c.peer }

// MaxFDsPerMsg returns the per-message descriptor limit.
func (c *Conn) MaxFDsPerMsg() int { return c.maxFDs }

// AwaitsHangUp reports true: one closing c after a last frame (a Bye)
// should first wait for the peer to hang up. A unix socket has no
// acknowledgements to wait for, and closing it with frames of the peer
// unread makes the peer's next read fail with ECONNRESET before the
// frames queued for it. A transport wrapping c says the same by
// forwarding this method (ctrlchan asks the transport, not its type).
func (c *Conn) AwaitsHangUp() bool { return true }

// Send sends frame as one message, with fds attached (SCM_RIGHTS) in the
// same sendmsg. It does not take ownership of fds: the kernel installs
// duplicates in the peer, and the caller still owns (and closes) its own.
// fds must stay open until Send returns. A message must fit the socket's
// send buffer: about 200 KiB with Linux's default wmem_default (larger
// ones fail with EMSGSIZE); control frames are far smaller.
func (c *Conn) Send(frame []byte, fds []*fd.FD) error {
	if len(frame) == 0 {
		return fmt.Errorf("%w: empty message", ErrInvalid)
	}
	if len(fds) > c.maxFDs {
		return fmt.Errorf("%w: sending %d (max %d)", ErrTooManyFDs, len(fds), c.maxFDs)
	}
	if c.closed.Load() {
		return ErrClosed
	}
	var oob []byte
	if len(fds) > 0 {
		var small [DefaultMaxFDsPerMsg]int
		raws := small[:0]
		for _, f := range fds {
			r := f.Int()
			if r < 0 {
				return fmt.Errorf("ipc: send: descriptor %w", fd.ErrClosed)
			}
			raws = append(raws, r)
		}
		oob = unix.UnixRights(raws...)
	}
	racesync.Sending([][]byte{frame})
	n, _, err := c.uc.WriteMsgUnix(frame, oob, nil)
	runtime.KeepAlive(fds)
	if err != nil {
		if c.closed.Load() || errors.Is(err, net.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("ipc: send: %w", err)
	}
	if n != len(frame) {
		return fmt.Errorf("ipc: send: short write %d of %d bytes", n, len(frame))
	}
	return nil
}

// Recv receives one message into buf and returns its length and the
// descriptors it carried, which the caller owns. Received descriptors are
// close-on-exec (MSG_CMSG_CLOEXEC) and wrapped in *fd.FD at once. If the
// message was larger than buf (MSG_TRUNC: ErrTruncated) or carried more
// than MaxFDsPerMsg descriptors (MSG_CTRUNC, or too many: ErrTooManyFDs),
// the message is dropped, every descriptor that arrived is closed, and the
// connection stays usable. A closed peer gives io.EOF. An empty buf is
// refused (ErrInvalid) without receiving: no message would fit (Go's
// recvmsg then reads one byte into a buffer of its own).
func (c *Conn) Recv(buf []byte) (int, []*fd.FD, error) {
	if len(buf) == 0 {
		return 0, nil, fmt.Errorf("%w: empty receive buffer", ErrInvalid)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closed.Load() {
		return 0, nil, ErrClosed
	}
	n, oobn, flags, _, err := c.uc.ReadMsgUnix(buf, c.oob)
	if n > 0 {
		racesync.Received()
	}
	fds, perr := parseRights(c.oob[:max(oobn, 0)])
	if err != nil {
		closeAll(fds)
		if c.closed.Load() || errors.Is(err, net.ErrClosed) {
			return 0, nil, ErrClosed
		}
		return 0, nil, fmt.Errorf("ipc: recv: %w", err)
	}
	switch {
	case perr != nil:
		err = perr
	case flags&unix.MSG_CTRUNC != 0:
		err = fmt.Errorf("%w: control data truncated (limit %d)", ErrTooManyFDs, c.maxFDs)
	case len(fds) > c.maxFDs:
		err = fmt.Errorf("%w: received %d (limit %d)", ErrTooManyFDs, len(fds), c.maxFDs)
	case flags&unix.MSG_TRUNC != 0:
		err = fmt.Errorf("%w: buffer of %d bytes", ErrTruncated, len(buf))
	case n == 0:
		err = io.EOF // orderly shutdown (no valid frame is empty)
	}
	if err != nil {
		closeAll(fds)
		if err != io.EOF {
			c.log.Warn().Err(err).Int("fds", len(fds)).Msg("ipc: message dropped")
		}
		return 0, nil, err
	}
	return n, fds, nil
}

// parseRights wraps every descriptor in the control data. If it finds
// anything else, it still wraps every descriptor it can and reports an
// error (the caller closes them).
func parseRights(oob []byte) ([]*fd.FD, error) {
	var (
		fds  []*fd.FD
		perr error
	)
	for len(oob) > 0 {
		if len(oob) < unix.SizeofCmsghdr {
			return fds, errors.Join(perr, fmt.Errorf("ipc: recv: %d stray control bytes", len(oob)))
		}
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return fds, errors.Join(perr, fmt.Errorf("ipc: recv: control message: %w", err))
		}
		oob = rest
		if h.Level != unix.SOL_SOCKET || h.Type != unix.SCM_RIGHTS {
			perr = fmt.Errorf("ipc: recv: unexpected control message level %d type %d", h.Level, h.Type)
			continue
		}
		raws, err := unix.ParseUnixRights(&unix.SocketControlMessage{Header: h, Data: data[:len(data)&^3]})
		if err != nil {
			perr = fmt.Errorf("ipc: recv: %w", err)
		}
		for _, raw := range raws {
			f, err := fd.New(raw)
			if err != nil {
				perr = fmt.Errorf("ipc: recv: %w", err)
				continue
			}
			fds = append(fds, f)
		}
	}
	return fds, perr
}

func closeAll(fds []*fd.FD) {
	for _, f := range fds {
		_ = f.Close()
	}
}

// SetReadDeadline sets the deadline for Recv (zero: none).
func (c *Conn) SetReadDeadline(t time.Time) error { return c.uc.SetReadDeadline(t) }

// SetWriteDeadline sets the deadline for Send (zero: none).
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.uc.SetWriteDeadline(t) }

// Close closes the connection, unblocking Send and Recv. Later calls
// return the first call's result.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if err := c.uc.Close(); err != nil {
			c.closeErr = fmt.Errorf("ipc: close: %w", err)
		}
	})
	return c.closeErr
}
