package ipc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
)

// DefaultMaxFDsPerMsg is Config.MaxFDsPerMsg's default.
const DefaultMaxFDsPerMsg = 16

// maxFDsLimit is the kernel's SCM_MAX_FD.
const maxFDsLimit = 253

// Config configures listeners and connections.
type Config struct {
	// AllowUIDs lists the uids, besides this process's effective uid,
	// whose processes may connect (on Accept) or be connected to (on
	// Dial). Everyone else is refused after the kernel reports their
	// credentials (SO_PEERCRED).
	AllowUIDs []uint32
	// Logger receives refusals and receive errors. The zero value discards
	// them.
	Logger zerolog.Logger
	// MaxFDsPerMsg bounds the descriptors in one message, sent or
	// received (0 means DefaultMaxFDsPerMsg; at most 253).
	MaxFDsPerMsg int
}

func (cfg Config) normalize() (Config, error) {
	switch {
	case cfg.MaxFDsPerMsg == 0:
		cfg.MaxFDsPerMsg = DefaultMaxFDsPerMsg
	case cfg.MaxFDsPerMsg < 0 || cfg.MaxFDsPerMsg > maxFDsLimit:
		return cfg, fmt.Errorf("%w: MaxFDsPerMsg %d (1..%d)", ErrInvalid, cfg.MaxFDsPerMsg, maxFDsLimit)
	}
	cfg.AllowUIDs = slices.Clone(cfg.AllowUIDs)
	return cfg, nil
}

// allowed reports whether a peer of uid may talk to us.
func (cfg *Config) allowed(uid uint32) bool {
	return uid == uint32(os.Geteuid()) || slices.Contains(cfg.AllowUIDs, uid)
}

func checkPath(path string) error {
	switch {
	case path == "":
		return fmt.Errorf("%w: empty socket path", ErrInvalid)
	case path[0] == '@' || path[0] == 0:
		// Abstract sockets have no file permissions: anyone in the
		// network namespace could connect.
		return fmt.Errorf("%w: abstract socket %q (no file permissions)", ErrInvalid, path)
	case len(path) >= len(unix.RawSockaddrUnix{}.Path):
		return fmt.Errorf("%w: socket path of %d bytes (max %d)", ErrInvalid, len(path), len(unix.RawSockaddrUnix{}.Path)-1)
	}
	return nil
}

// Listener accepts connections on a unix SOCK_SEQPACKET socket.
type Listener struct {
	ln       *net.UnixListener
	path     string
	dev, ino uint64 // the socket file we created, removed by Close
	cfg      Config
	log      zerolog.Logger

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Listen creates a unix SOCK_SEQPACKET socket at path and listens on it.
// The socket file is made mode 0600 before the socket listens, so no
// process of another uid can connect at any moment (connecting to a bound
// socket that does not listen yet is refused). path must not exist. The
// directory holding it should not be writable by untrusted users (as for
// any unix socket: they could replace the file). Descriptors are
// close-on-exec.
func Listen(path string, cfg Config) (_ *Listener, err error) {
	if cfg, err = cfg.normalize(); err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	raw, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("ipc: listen %s: socket: %w", path, err)
	}
	sock, err := fd.New(raw)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sock.Close() }() // until it moves into an *os.File; the listener works on a dup

	err = unix.Bind(sock.Int(), &unix.SockaddrUnix{Name: path})
	if errors.Is(err, unix.EADDRINUSE) && removeStale(path) {
		err = unix.Bind(sock.Int(), &unix.SockaddrUnix{Name: path})
	}
	if err != nil {
		return nil, fmt.Errorf("ipc: listen %s: bind: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("ipc: listen %s: %w", path, err)
	}
	removeOnErr := func() {
		// Remove the file only if it is still the socket we bound.
		var now unix.Stat_t
		if unix.Lstat(path, &now) == nil && now.Dev == st.Dev && now.Ino == st.Ino {
			_ = os.Remove(path)
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("ipc: listen %s: bound path is not a socket (replaced?)", path)
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, path, 0o600, 0); err != nil {
		removeOnErr()
		return nil, fmt.Errorf("ipc: listen %s: chmod: %w", path, err)
	}
	if err := unix.Listen(sock.Int(), unix.SOMAXCONN); err != nil {
		removeOnErr()
		return nil, fmt.Errorf("ipc: listen %s: %w", path, err)
	}
	// net.FileListener dups the descriptor (close-on-exec, non-blocking)
	// and registers it with the runtime poller.
	f, err := sock.File(path)
	if err != nil {
		removeOnErr()
		return nil, err
	}
	nl, err := net.FileListener(f)
	_ = f.Close()
	if err != nil {
		removeOnErr()
		return nil, fmt.Errorf("ipc: listen %s: %w", path, err)
	}
	ul, ok := nl.(*net.UnixListener)
	if !ok {
		_ = nl.Close()
		removeOnErr()
		return nil, fmt.Errorf("ipc: listen %s: unexpected listener %T", path, nl)
	}
	ul.SetUnlinkOnClose(false) // Close removes the file after checking it is ours
	l := &Listener{ln: ul, path: path, dev: uint64(st.Dev), ino: st.Ino, cfg: cfg,
		log: cfg.Logger.With().Str("component", "ipc").Str("socket", path).Logger()}
	return l, nil
}

// Path returns the socket path.
func (l *Listener) Path() string { return l.path }

// Accept waits for a connection and checks the peer's credentials. A peer
// of a uid that is not allowed has its connection closed, is logged, and
// makes Accept return a *PeerRefusedError (matching ErrPeerRefused): an
// accept loop should continue after it. Close unblocks Accept (ErrClosed),
// and so does ctx (its error). Accept is meant for one accept loop
// goroutine.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, _ := ctx.Deadline()
	if err := l.ln.SetDeadline(d); err != nil {
		return nil, l.acceptErr(ctx, err)
	}
	var uc *net.UnixConn
	var err error
	if ctx.Done() == nil {
		uc, err = l.ln.AcceptUnix()
	} else {
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			_ = l.ln.SetDeadline(time.Unix(1, 0))
			close(fired)
		})
		uc, err = l.ln.AcceptUnix()
		if !stop() {
			<-fired
		}
	}
	if err != nil {
		return nil, l.acceptErr(ctx, err)
	}
	return newConn(uc, l.cfg, "accept")
}

func (l *Listener) acceptErr(ctx context.Context, err error) error {
	if l.closed.Load() || errors.Is(err, net.ErrClosed) {
		return ErrClosed
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return fmt.Errorf("ipc: accept %s: %w", l.path, err)
}

// Close stops listening, unblocks Accept and removes the socket file (if
// it is still the one Listen created). Connections already accepted stay
// open. Later calls return the first call's result.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		err := l.ln.Close()
		var st unix.Stat_t
		if unix.Lstat(l.path, &st) == nil && uint64(st.Dev) == l.dev && st.Ino == l.ino {
			if rerr := os.Remove(l.path); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		if err != nil {
			l.closeErr = fmt.Errorf("ipc: close %s: %w", l.path, err)
		}
	})
	return l.closeErr
}

// Dial connects to the listener at path and checks the credentials of the
// process that created it (SO_PEERCRED): a listener of a uid that is not
// allowed is refused with a *PeerRefusedError. ctx bounds the connect.
func Dial(ctx context.Context, path string, cfg Config) (*Conn, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, fmt.Errorf("ipc: dial %s: %w", path, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("ipc: dial %s: unexpected connection %T", path, c)
	}
	return newConn(uc, cfg, "dial")
}

// peerCred reads SO_PEERCRED of a connected socket.
func peerCred(uc *net.UnixConn) (Cred, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, err
	}
	var (
		u    *unix.Ucred
		uerr error
	)
	if err := rc.Control(func(raw uintptr) {
		u, uerr = unix.GetsockoptUcred(int(raw), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Cred{}, err
	}
	if uerr != nil {
		return Cred{}, fmt.Errorf("SO_PEERCRED: %w", uerr)
	}
	return Cred{PID: uint32(u.Pid), UID: u.Uid, GID: u.Gid}, nil
}

// Cred is a peer's credentials as the kernel reports them (SO_PEERCRED):
// for an accepted connection, the dialer's at connect time; for a dialed
// one, the listener's at listen time. PID is in this process's pid
// namespace (0 if the peer is not visible in it).
type Cred struct {
	PID uint32
	UID uint32
	GID uint32
}

// PIDNamespace returns the inode of this process's pid namespace
// (/proc/self/ns/pid), which Hello and RemoteKey carry so that peers can
// tell whether pids are comparable.
func PIDNamespace() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0, fmt.Errorf("ipc: pid namespace: %w", err)
	}
	return st.Ino, nil
}

// removeStale removes the socket file at path if it is a socket of this
// uid that no one listens on (its listener died without removing it: a
// SIGKILLed process), so that a restarted process can bind the same path.
// A live listener's socket (the connect is accepted or would block) and
// anything that is not a socket of ours are left alone.
func removeStale(path string) bool {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Uid != uint32(os.Getuid()) {
		return false
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer unix.Close(s)
	if err := unix.Connect(s, &unix.SockaddrUnix{Name: path}); !errors.Is(err, unix.ECONNREFUSED) {
		return false
	}
	var now unix.Stat_t
	if unix.Lstat(path, &now) != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return false
	}
	return os.Remove(path) == nil
}
