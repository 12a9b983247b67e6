package ipc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/wire"
)

// Environment of a re-executed child.
const (
	childRoleEnv  = "GXFER_IPC_CHILD" // the role to run
	childSockEnv  = "GXFER_IPC_SOCK"  // the parent's socket
	childAllowEnv = "GXFER_IPC_ALLOW" // comma-separated AllowUIDs
	childArgEnv   = "GXFER_IPC_ARG"   // role-specific argument
	childTimeout  = 2 * time.Minute   // a child never outlives a stuck parent by more
)

// pattern returns the byte at i of the test pattern of seed.
func pattern(i int, seed byte) byte { return byte(i%251) ^ seed }

// runChild runs one peer role and returns the exit code; failures are
// written to stderr, which the parent shows.
func runChild(role string) int {
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()
	var err error
	switch role {
	case "shm":
		err = childShm(ctx)
	case "fds":
		err = childFDs(ctx)
	case "sendfds":
		err = childSendFDs(ctx)
	case "uid":
		err = childUID(ctx)
	case "hang":
		err = childHang(ctx)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s (pid %d uid %d): %v\n", role, os.Getpid(), os.Geteuid(), err)
		return 1
	}
	return 0
}

func childConfig() Config {
	var cfg Config
	for _, s := range strings.Split(os.Getenv(childAllowEnv), ",") {
		if s == "" {
			continue
		}
		u, err := strconv.ParseUint(s, 10, 32)
		if err == nil {
			cfg.AllowUIDs = append(cfg.AllowUIDs, uint32(u))
		}
	}
	return cfg
}

func childDial(ctx context.Context) (*wire.Conn, error) {
	c, err := Dial(ctx, os.Getenv(childSockEnv), childConfig())
	if err != nil {
		return nil, err
	}
	return wire.NewConn(c, wire.ConnConfig{}), nil
}

func childHello() *wire.Hello {
	ns, _ := PIDNamespace()
	return &wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Caps: wire.CapFDPassing | wire.CapSharedHost,
		PID: uint32(os.Getpid()), PIDNamespace: ns, UID: uint32(os.Geteuid()), Name: "child"}
}

// childShm: receive a memfd (ImportReply), map it, verify the parent's
// pattern, write another, answer with a Completion, wait for Bye.
func childShm(ctx context.Context) error {
	conn, err := childDial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Send(childHello()); err != nil {
		return err
	}
	f, err := conn.Recv(ctx)
	if err != nil {
		return err
	}
	var rep wire.ImportReply
	if err := f.Decode(&rep); err != nil {
		_ = f.CloseFDs()
		return err
	}
	m, err := MapShared(f.FDs[0], int(rep.Size))
	_ = f.CloseFDs() // the mapping keeps the file
	if err != nil {
		return err
	}
	defer m.Close()
	b := m.Bytes()
	for i := range b {
		if b[i] != pattern(i, 0) {
			return fmt.Errorf("byte %d is %#x, want %#x", i, b[i], pattern(i, 0))
		}
	}
	for i := range b {
		b[i] = pattern(i, 0x5a)
	}
	if err := conn.Send(&wire.Completion{RequestID: rep.RequestID, Status: wire.StatusOK}); err != nil {
		return err
	}
	f, err = conn.Recv(ctx)
	if err != nil {
		return err
	}
	if f.Header.Type != wire.TypeBye {
		return fmt.Errorf("got %v, want Bye", f.Header.Type)
	}
	return nil
}

// childFDs: receive one message of memfds, check each one's content and
// close-on-exec flag, and send them all back in one message.
func childFDs(ctx context.Context) error {
	c, err := Dial(ctx, os.Getenv(childSockEnv), childConfig())
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 64)
	n, fds, err := c.Recv(buf)
	if err != nil {
		return err
	}
	defer closeAll(fds)
	want, _ := strconv.Atoi(string(buf[:n]))
	if len(fds) != want {
		return fmt.Errorf("got %d fds, want %d", len(fds), want)
	}
	for i, f := range fds {
		flags, err := unix.FcntlInt(uintptr(f.Int()), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			return fmt.Errorf("fd %d: flags %#x, %v: not close-on-exec", i, flags, err)
		}
		got := make([]byte, 16)
		k, err := unix.Pread(f.Int(), got, 0)
		if err != nil {
			return err
		}
		if w := fmt.Sprintf("fd-%d", i); string(bytes.TrimRight(got[:k], "\x00")) != w {
			return fmt.Errorf("fd %d holds %q, want %q", i, got[:k], w)
		}
	}
	if err := c.Send([]byte("back"), fds); err != nil {
		return err
	}
	_, _, err = c.Recv(buf) // wait for the parent to close
	if !errors.Is(err, io.EOF) {
		return fmt.Errorf("waiting for close: %v", err)
	}
	return nil
}

// childSendFDs: for each count in the argument ("8,4"), send one message
// carrying that many fds; then wait for the parent to close.
func childSendFDs(ctx context.Context) error {
	cfg := childConfig()
	cfg.MaxFDsPerMsg = 64
	c, err := Dial(ctx, os.Getenv(childSockEnv), cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, s := range strings.Split(os.Getenv(childArgEnv), ",") {
		n, _ := strconv.Atoi(s)
		var fds []*fd.FD
		for range n {
			sh, err := NewShared(4096, "child")
			if err != nil {
				return err
			}
			d, err := sh.FD().Dup()
			_ = sh.Close()
			if err != nil {
				return err
			}
			fds = append(fds, d)
		}
		err := c.Send([]byte("fds:"+s), fds)
		closeAll(fds)
		if err != nil {
			return err
		}
	}
	_, _, err = c.Recv(make([]byte, 16))
	if !errors.Is(err, io.EOF) {
		return fmt.Errorf("waiting for close: %v", err)
	}
	return nil
}

// childUID runs as another uid. Argument: the expected outcome.
//
//	eacces        Dial fails: the socket file is 0600
//	refused       Dial succeeds at the kernel level, the parent refuses
//	              (Accept), so the connection is closed: Recv sees EOF
//	dial-refuses  this side refuses the parent (uid 0 not allowed here)
//	accepted      the parent accepts: it answers a Hello with HelloAck
func childUID(ctx context.Context) error {
	want := os.Getenv(childArgEnv)
	c, err := Dial(ctx, os.Getenv(childSockEnv), childConfig())
	switch want {
	case "eacces":
		if !errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("dial: %v, want EACCES", err)
		}
		return nil
	case "dial-refuses":
		var pe *PeerRefusedError
		if !errors.As(err, &pe) || pe.Side != "dial" || pe.Peer.UID != 0 {
			return fmt.Errorf("dial: %v, want a dial-side refusal of uid 0", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("dial: %v", err)
	}
	conn := wire.NewConn(c, wire.ConnConfig{})
	defer conn.Close()
	switch want {
	case "refused":
		_, err := conn.Recv(ctx)
		if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			return fmt.Errorf("recv after refusal: %v, want EOF", err)
		}
		return nil
	case "accepted":
		if err := conn.Send(childHello()); err != nil {
			return err
		}
		f, err := conn.Recv(ctx)
		if err != nil {
			return err
		}
		var ack wire.HelloAck
		return f.Decode(&ack)
	}
	return fmt.Errorf("unknown outcome %q", want)
}

// childHang sends a Hello, receives one request and never answers.
func childHang(ctx context.Context) error {
	conn, err := childDial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Send(childHello()); err != nil {
		return err
	}
	if _, err := conn.Recv(ctx); err != nil {
		return err
	}
	<-ctx.Done() // the parent kills us first
	return nil
}

// child is a running peer process.
type child struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	waited chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type childOpts struct {
	exe   string // binary to run (default: this test binary)
	dir   string
	cred  *syscall.Credential
	allow string // GXFER_IPC_ALLOW
	arg   string // GXFER_IPC_ARG
}

// startChild re-executes the test binary as a peer running role against
// the socket at sock. The child is killed and reaped at cleanup.
func startChild(t *testing.T, role, sock string, o childOpts) *child {
	t.Helper()
	exe := o.exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childRoleEnv+"="+role, childSockEnv+"="+sock,
		childAllowEnv+"="+o.allow, childArgEnv+"="+o.arg,
		// Under -race the runtime sleeps 1s at exit by default.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Dir = o.dir
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if o.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.cred}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", role, err)
	}
	c := &child{cmd: cmd, out: out, waited: make(chan error, 1)}
	go func() { c.waited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-c.waited
		if t.Failed() {
			t.Logf("child %s: %v; output:\n%s", role, err, out.String())
		}
	})
	return c
}

// wait waits for the child to exit and returns its error with its output.
func (c *child) wait() error {
	err := <-c.waited
	c.waited <- err // for cleanup
	if err != nil {
		return fmt.Errorf("%w; output:\n%s", err, c.out.String())
	}
	return nil
}
