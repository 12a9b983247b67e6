package ipc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/wire"
)

var _ wire.Transport = (*Conn)(nil)

func sockPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "gxfer.sock")
}

func listen(t testing.TB, cfg Config) *Listener {
	t.Helper()
	l, err := Listen(sockPath(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func accept(t *testing.T, l *Listener) *Conn {
	t.Helper()
	c, err := l.Accept(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pair returns two connected Conns of this process.
func pair(t testing.TB, cfg Config) (server, client *Conn) {
	t.Helper()
	l := listen(t, cfg)
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept(context.Background())
		ch <- res{c, err}
	}()
	client, err := Dial(context.Background(), l.Path(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	r := <-ch
	require.NoError(t, r.err)
	t.Cleanup(func() { _ = r.c.Close() })
	return r.c, client
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = pattern(i, seed)
	}
}

func checkPattern(t *testing.T, b []byte, seed byte) {
	t.Helper()
	for i := range b {
		if b[i] != pattern(i, seed) {
			t.Fatalf("byte %d is %#x, want %#x", i, b[i], pattern(i, seed))
		}
	}
}

// TestCrossProcessSharedMemory: the child maps a memfd the parent sends
// over the socket, checks the parent's data, writes its own, and the
// parent sees it: real shared memory between two processes.
func TestCrossProcessSharedMemory(t *testing.T) {
	l := listen(t, Config{})
	ch := startChild(t, "shm", l.Path(), childOpts{})
	c := accept(t, l)
	require.Equal(t, uint32(ch.cmd.Process.Pid), c.Peer().PID)
	require.Equal(t, uint32(os.Geteuid()), c.Peer().UID)

	conn := wire.NewConn(c, wire.ConnConfig{})
	ctx := context.Background()
	f, err := conn.Recv(ctx)
	require.NoError(t, err)
	var hello wire.Hello
	require.NoError(t, f.Decode(&hello))
	require.Equal(t, c.Peer().PID, hello.PID, "the Hello's pid matches SO_PEERCRED")
	ns, err := PIDNamespace()
	require.NoError(t, err)
	require.Equal(t, ns, hello.PIDNamespace)

	const size = 1<<20 + 123
	sh, err := NewShared(size, "cross-process")
	require.NoError(t, err)
	defer sh.Close()
	fill(sh.Bytes(), 0)
	require.NoError(t, conn.Send(&wire.ImportReply{RequestID: 77, AllocID: 1, Generation: 1, Kind: wire.FDMemfd, Size: size}, sh.FD(), testValidity(t).FD()))

	f, err = conn.Recv(ctx)
	require.NoError(t, err)
	var done wire.Completion
	require.NoError(t, f.Decode(&done))
	require.Equal(t, wire.Completion{RequestID: 77, Status: wire.StatusOK}, done)
	checkPattern(t, sh.Bytes(), 0x5a)

	require.NoError(t, conn.Send(&wire.Bye{}))
	require.NoError(t, ch.wait())
	require.NoError(t, conn.Close())
}

// TestCrossProcessManyFDs sends MaxFDsPerMsg memfds in one message; the
// child checks them and sends them all back; the parent checks it got the
// same files.
func TestCrossProcessManyFDs(t *testing.T) {
	l := listen(t, Config{})
	ch := startChild(t, "fds", l.Path(), childOpts{})
	c := accept(t, l)

	const n = DefaultMaxFDsPerMsg
	var sent []*fd.FD
	var inodes []uint64
	for i := range n {
		sh, err := NewShared(4096, fmt.Sprintf("fd-%d", i))
		require.NoError(t, err)
		copy(sh.Bytes(), fmt.Sprintf("fd-%d", i))
		d, err := sh.FD().Dup()
		require.NoError(t, sh.Close())
		require.NoError(t, err)
		sent = append(sent, d)
		var st unix.Stat_t
		require.NoError(t, unix.Fstat(d.Int(), &st))
		inodes = append(inodes, st.Ino)
	}
	defer closeAll(sent)
	require.NoError(t, c.Send([]byte(strconv.Itoa(n)), sent))

	buf := make([]byte, 64)
	k, fds, err := c.Recv(buf)
	require.NoError(t, err)
	defer closeAll(fds)
	require.Equal(t, "back", string(buf[:k]))
	require.Len(t, fds, n)
	for i, f := range fds {
		var st unix.Stat_t
		require.NoError(t, unix.Fstat(f.Int(), &st))
		require.Equal(t, inodes[i], st.Ino, "fd %d", i)
	}
	require.NoError(t, c.Close())
	require.NoError(t, ch.wait())
}

// TestCrossProcessTooManyFDs: a peer sends more fds than the receiver's
// MaxFDsPerMsg. The receive fails with ErrTooManyFDs, no fd leaks, and the
// connection stays usable.
func TestCrossProcessTooManyFDs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int
		sends string
	}{
		// CmsgSpace(4*4) holds exactly 4 fds: the kernel truncates (MSG_CTRUNC).
		{"ctrunc", 4, "8,4"},
		// CmsgSpace(4*3) is rounded up and holds 4 fds: no MSG_CTRUNC, the
		// count check refuses.
		{"over-limit", 3, "4,3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := listen(t, Config{MaxFDsPerMsg: tc.limit})
			ch := startChild(t, "sendfds", l.Path(), childOpts{arg: tc.sends})
			c := accept(t, l)
			before := testutil.OpenFDs()

			buf := make([]byte, 64)
			_, fds, err := c.Recv(buf)
			require.ErrorIs(t, err, ErrTooManyFDs)
			require.Nil(t, fds)
			require.Empty(t, testutil.LeakedFDs(before), "fds of a refused message leaked")

			n, fds, err := c.Recv(buf)
			require.NoError(t, err)
			require.Equal(t, "fds:"+strconv.Itoa(tc.limit), string(buf[:n]))
			require.Len(t, fds, tc.limit)
			closeAll(fds)
			require.Empty(t, testutil.LeakedFDs(before))

			require.NoError(t, c.Close())
			require.NoError(t, ch.wait())
		})
	}
}

// TestCrossProcessOtherUID runs the peer as uid 65534.
func TestCrossProcessOtherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the child must run as another uid (uid 65534)")
	}
	const nobody = 65534
	// The socket and the binary must be reachable by uid 65534, so they go
	// in a directory of ours that others may traverse (t.TempDir is 0700).
	dir, err := os.MkdirTemp("", "gxfer-ipc-uid-")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	require.NoError(t, os.Chmod(dir, 0o755))
	self, err := os.Executable()
	require.NoError(t, err)
	exe := filepath.Join(dir, "ipc.test")
	copyFile(t, self, exe, 0o755)
	cred := &syscall.Credential{Uid: nobody, Gid: nobody}

	for i, tc := range []struct {
		name       string
		cfg        Config
		relax      bool   // chmod the socket 0666 so the kernel lets uid 65534 connect
		allow      string // the child's AllowUIDs
		outcome    string // the child's expectation (see childUID)
		wantAccept error  // nil: accepted
	}{
		{"socket mode 0600 keeps others out", Config{}, false, "0", "eacces", nil},
		{"listener refuses (SO_PEERCRED)", Config{}, true, "0", "refused", ErrPeerRefused},
		{"dialer refuses (SO_PEERCRED)", Config{AllowUIDs: []uint32{nobody}}, true, "", "dial-refuses", nil},
		{"AllowUIDs admits", Config{AllowUIDs: []uint32{nobody}}, true, "0", "accepted", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("s%d.sock", i))
			var logs lockedBuffer
			tc.cfg.Logger = zerolog.New(&logs)
			l, err := Listen(path, tc.cfg)
			require.NoError(t, err)
			defer l.Close()
			if tc.relax {
				require.NoError(t, os.Chmod(path, 0o666)) // test only: let the kernel admit the connect
			}
			ch := startChild(t, "uid", path, childOpts{exe: exe, dir: dir, cred: cred, allow: tc.allow, arg: tc.outcome})
			if tc.outcome == "eacces" {
				require.NoError(t, ch.wait())
				return
			}
			c, err := l.Accept(context.Background())
			if tc.wantAccept != nil {
				require.ErrorIs(t, err, tc.wantAccept)
				var pe *PeerRefusedError
				require.True(t, errors.As(err, &pe))
				require.Equal(t, uint32(nobody), pe.Peer.UID)
				require.Equal(t, "accept", pe.Side)
				require.Contains(t, logs.String(), `"peer_uid":65534`)
				require.Contains(t, logs.String(), "peer refused")
				require.NoError(t, ch.wait())
				return
			}
			require.NoError(t, err)
			defer c.Close()
			require.Equal(t, uint32(nobody), c.Peer().UID)
			conn := wire.NewConn(c, wire.ConnConfig{})
			if tc.outcome == "accepted" {
				f, err := conn.Recv(context.Background())
				require.NoError(t, err)
				var h wire.Hello
				require.NoError(t, f.Decode(&h))
				require.Equal(t, uint32(nobody), h.UID)
				ack, err := wire.Negotiate(wire.Hello{MinVersion: 1, MaxVersion: 1}, h)
				require.NoError(t, err)
				require.NoError(t, conn.Send(&ack))
			} else { // the dialer hung up on us
				_, err := conn.Recv(context.Background())
				require.Error(t, err)
			}
			require.NoError(t, ch.wait())
		})
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, mode))
}

// TestCrossProcessPeerKilled: the peer dies mid-conversation (a request
// outstanding); the parent's Recv returns an error (EOF or ECONNRESET),
// without any timer.
func TestCrossProcessPeerKilled(t *testing.T) {
	l := listen(t, Config{})
	ch := startChild(t, "hang", l.Path(), childOpts{})
	c := accept(t, l)
	conn := wire.NewConn(c, wire.ConnConfig{})
	ctx := context.Background()
	f, err := conn.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, wire.TypeHello, f.Header.Type)
	k := testRemoteKey()
	require.NoError(t, conn.Send(&wire.Get{Request: wire.Request{RequestID: 1, Key: k, Length: 1, Local: wire.Local{Kind: wire.LocalInline}}}))

	errc := make(chan error, 1)
	go func() {
		_, err := conn.Recv(ctx)
		errc <- err
	}()
	require.NoError(t, ch.cmd.Process.Kill())
	err = <-errc
	require.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET), "got %v", err)
	require.Error(t, ch.wait())
	require.NoError(t, conn.Close())
}

// testRemoteKey returns a valid (unsigned) key.
func testRemoteKey() wire.RemoteKey {
	return wire.RemoteKey{AllocID: 1, Generation: 1, MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead,
		Base: 0x1000, Length: 4096, GrantLen: 4096, Len: 4096}
}

func TestSocketMode(t *testing.T) {
	l := listen(t, Config{})
	st, err := os.Lstat(l.Path())
	require.NoError(t, err)
	require.Equal(t, os.ModeSocket, st.Mode().Type())
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

func TestListenErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		path string
		cfg  Config
		want error
	}{
		{"empty", "", Config{}, ErrInvalid},
		{"abstract", "@gxfer", Config{}, ErrInvalid},
		{"too long", filepath.Join(dir, string(make([]byte, 200))), Config{}, ErrInvalid},
		{"max fds", filepath.Join(dir, "a.sock"), Config{MaxFDsPerMsg: 254}, ErrInvalid},
		{"negative fds", filepath.Join(dir, "a.sock"), Config{MaxFDsPerMsg: -1}, ErrInvalid},
		{"no dir", filepath.Join(dir, "nope", "a.sock"), Config{}, syscall.ENOENT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Listen(tc.path, tc.cfg)
			require.ErrorIs(t, err, tc.want)
			_, err = Dial(context.Background(), tc.path, tc.cfg)
			require.Error(t, err)
		})
	}
	// An existing path is not replaced.
	l := listen(t, Config{})
	_, err := Listen(l.Path(), Config{})
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	_, err = os.Lstat(l.Path())
	require.NoError(t, err, "the first listener's socket is still there")
	// Dialing a path nobody listens on.
	_, err = Dial(context.Background(), filepath.Join(dir, "none.sock"), Config{})
	require.ErrorIs(t, err, syscall.ENOENT)
}

func TestListenerClose(t *testing.T) {
	l, err := Listen(sockPath(t), Config{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "Close is idempotent")
	_, err = os.Lstat(l.Path())
	require.ErrorIs(t, err, os.ErrNotExist, "Close removes the socket file")
	_, err = l.Accept(context.Background())
	require.ErrorIs(t, err, ErrClosed)

	// A file that replaced the socket is not removed.
	l, err = Listen(sockPath(t), Config{})
	require.NoError(t, err)
	require.NoError(t, os.Remove(l.Path()))
	require.NoError(t, os.WriteFile(l.Path(), nil, 0o600))
	require.NoError(t, l.Close())
	_, err = os.Lstat(l.Path())
	require.NoError(t, err)
}

func TestAcceptUnblocked(t *testing.T) {
	t.Run("by Close", func(t *testing.T) {
		l, err := Listen(sockPath(t), Config{})
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() {
			_, err := l.Accept(context.Background())
			errc <- err
		}()
		require.NoError(t, l.Close())
		require.ErrorIs(t, <-errc, ErrClosed)
	})
	t.Run("by ctx", func(t *testing.T) {
		l := listen(t, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := l.Accept(ctx)
			errc <- err
		}()
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		// The listener still works afterwards.
		s, c := func() (*Conn, *Conn) {
			ch := make(chan *Conn, 1)
			go func() {
				c, err := l.Accept(context.Background())
				if err != nil {
					c = nil
				}
				ch <- c
			}()
			c, err := Dial(context.Background(), l.Path(), Config{})
			require.NoError(t, err)
			return <-ch, c
		}()
		require.NotNil(t, s)
		require.NoError(t, s.Close())
		require.NoError(t, c.Close())
	})
	t.Run("by ctx deadline", func(t *testing.T) {
		l := listen(t, Config{})
		ctx, cancel := context.WithTimeout(context.Background(), 1)
		defer cancel()
		_, err := l.Accept(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestConnSendRecv(t *testing.T) {
	s, c := pair(t, Config{})
	require.Equal(t, uint32(os.Getpid()), s.Peer().PID)
	require.Equal(t, uint32(os.Getpid()), c.Peer().PID)
	require.Equal(t, uint32(os.Getegid()), c.Peer().GID)
	require.Equal(t, DefaultMaxFDsPerMsg, c.MaxFDsPerMsg())

	sh, err := NewShared(4096, "t")
	require.NoError(t, err)
	defer sh.Close()
	copy(sh.Bytes(), "shared")
	require.NoError(t, c.Send([]byte("one"), []*fd.FD{sh.FD()}))
	require.NoError(t, c.Send([]byte("two"), nil))

	buf := make([]byte, 16)
	n, fds, err := s.Recv(buf)
	require.NoError(t, err)
	require.Equal(t, "one", string(buf[:n]))
	require.Len(t, fds, 1)
	flags, err := unix.FcntlInt(uintptr(fds[0].Int()), unix.F_GETFD, 0)
	require.NoError(t, err)
	require.NotZero(t, flags&unix.FD_CLOEXEC, "received fds are close-on-exec")
	m, err := MapShared(fds[0], 4096)
	require.NoError(t, err)
	require.NoError(t, fds[0].Close())
	require.Equal(t, "shared", string(m.Bytes()[:6]))
	require.NoError(t, m.Close())

	n, fds, err = s.Recv(buf)
	require.NoError(t, err)
	require.Equal(t, "two", string(buf[:n]))
	require.Empty(t, fds)

	// Sender-side checks.
	require.ErrorIs(t, c.Send(nil, nil), ErrInvalid)
	many := make([]*fd.FD, DefaultMaxFDsPerMsg+1)
	require.ErrorIs(t, c.Send([]byte("x"), many), ErrTooManyFDs)
	closed, err := sh.FD().Dup()
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	require.ErrorIs(t, c.Send([]byte("x"), []*fd.FD{closed}), fd.ErrClosed)
}

// TestConnTruncated: a message larger than the receive buffer is dropped
// (MSG_TRUNC) with its fds closed, and the connection stays usable.
func TestConnTruncated(t *testing.T) {
	s, c := pair(t, Config{})
	sh, err := NewShared(4096, "t")
	require.NoError(t, err)
	defer sh.Close()
	before := testutil.OpenFDs()
	require.NoError(t, c.Send(make([]byte, 100), []*fd.FD{sh.FD(), sh.FD()}))
	require.NoError(t, c.Send([]byte("ok"), nil))
	buf := make([]byte, 10)
	_, fds, err := s.Recv(buf)
	require.ErrorIs(t, err, ErrTruncated)
	require.Nil(t, fds)
	require.Empty(t, testutil.LeakedFDs(before))
	n, _, err := s.Recv(buf)
	require.NoError(t, err)
	require.Equal(t, "ok", string(buf[:n]))
}

func TestConnCloseAndEOF(t *testing.T) {
	s, c := pair(t, Config{})
	errc := make(chan error, 1)
	go func() {
		_, _, err := s.Recv(make([]byte, 8))
		errc <- err
	}()
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-errc, ErrClosed)
	require.NoError(t, s.Close(), "Close is idempotent")
	require.ErrorIs(t, s.Send([]byte("x"), nil), ErrClosed)
	_, _, err := s.Recv(make([]byte, 8))
	require.ErrorIs(t, err, ErrClosed)
	// The other side sees EOF.
	_, _, err = c.Recv(make([]byte, 8))
	require.ErrorIs(t, err, io.EOF)
}

// TestWireOverIPC runs the wire handshake and an import over an ipc
// connection, with the fd going through wire.Conn.
func TestWireOverIPC(t *testing.T) {
	s, c := pair(t, Config{})
	server, client := wire.NewConn(s, wire.ConnConfig{}), wire.NewConn(c, wire.ConnConfig{})
	ctx := context.Background()
	ns, err := PIDNamespace()
	require.NoError(t, err)
	local := wire.Hello{MinVersion: 1, MaxVersion: 1, Caps: wire.CapFDPassing | wire.CapSharedHost, PID: uint32(os.Getpid()), PIDNamespace: ns}
	require.NoError(t, client.Send(&local))

	f, err := server.Recv(ctx)
	require.NoError(t, err)
	var h wire.Hello
	require.NoError(t, f.Decode(&h))
	require.Equal(t, s.Peer().PID, h.PID)
	ack, err := wire.Negotiate(local, h)
	require.NoError(t, err)
	require.NoError(t, server.Send(&ack))

	f, err = client.Recv(ctx)
	require.NoError(t, err)
	var got wire.HelloAck
	require.NoError(t, f.Decode(&got))
	require.NoError(t, wire.CheckAck(local, got))

	// Import: the client asks for a key's allocation; the server answers
	// with the memfd.
	sh, err := NewShared(8192, "alloc")
	require.NoError(t, err)
	defer sh.Close()
	fill(sh.Bytes(), 3)
	key := testRemoteKey()
	key.Length, key.GrantLen, key.Len = 8192, 8192, 8192
	require.NoError(t, client.Send(&wire.ImportRequest{RequestID: 5, Key: key}))
	f, err = server.Recv(ctx)
	require.NoError(t, err)
	var req wire.ImportRequest
	require.NoError(t, f.Decode(&req))
	require.NoError(t, server.Send(&wire.ImportReply{RequestID: req.RequestID, AllocID: req.Key.AllocID,
		Generation: req.Key.Generation, Kind: wire.FDMemfd, Size: req.Key.Length}, sh.FD(), testValidity(t).FD()))
	f, err = client.Recv(ctx)
	require.NoError(t, err)
	var rep wire.ImportReply
	require.NoError(t, f.Decode(&rep))
	require.Len(t, f.FDs, 2)
	m, err := MapShared(f.FDs[0], int(rep.Size))
	require.NoError(t, f.CloseFDs())
	require.NoError(t, err)
	checkPattern(t, m.Bytes(), 3)
	require.NoError(t, m.Close())

	// Cancelling a Recv works through the socket's deadline.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := client.Recv(cctx)
		errc <- err
	}()
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)

	require.NoError(t, client.Close())
	_, err = server.Recv(ctx)
	require.ErrorIs(t, err, io.EOF)
	require.NoError(t, server.Close())
}

// testValidity is a validity flag for crafted ImportReplies (closed at
// the end of the test).
func testValidity(t *testing.T) *Validity {
	t.Helper()
	v, err := NewValidity("test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = v.Close() })
	return v
}

// TestListenOverStaleSocket: a socket file left by a listener that died
// without removing it (SIGKILL) is replaced; a live listener's is not, nor
// a file that is not a socket.
func TestListenOverStaleSocket(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(t *testing.T, path string) // what is at path before Listen
		want  error                           // nil: Listen succeeds
	}{
		{"stale socket", func(t *testing.T, path string) {
			// Bound and listened, then the descriptor closed without
			// unlinking: what a killed process leaves.
			s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
			require.NoError(t, err)
			require.NoError(t, unix.Bind(s, &unix.SockaddrUnix{Name: path}))
			require.NoError(t, unix.Listen(s, 1))
			require.NoError(t, unix.Close(s))
		}, nil},
		{"live listener", func(t *testing.T, path string) {
			l, err := Listen(path, Config{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
		}, syscall.EADDRINUSE},
		{"regular file", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, nil, 0o600))
		}, syscall.EADDRINUSE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := sockPath(t)
			tc.leave(t, path)
			l, err := Listen(path, Config{})
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				_, err = os.Lstat(path)
				require.NoError(t, err, "what was there is still there")
				return
			}
			require.NoError(t, err)
			require.NoError(t, l.Close())
		})
	}
}
