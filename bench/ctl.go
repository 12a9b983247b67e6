package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The perf server's control channel, the side channel of the peer tests
// (like ucx_perftest's TCP socket): over ipc a unix stream socket at the
// engine socket's path + ".ctl", over tcp the TCP port the client names
// (the engine then listens on an ephemeral port of the same host, given
// in the hello reply); one JSON object per line. The client
// asks, the server answers each request with one reply; a reply with an
// error field is a refusal. The server serves one client at a time.

// CtlSuffix is appended to the engine socket's path to name the control
// socket.
const CtlSuffix = ".ctl"

const (
	ctlVersion    = 2 // 2: ping, and the server's idle limit between requests
	ctlMaxLine    = 1 << 20
	ctlTimeout    = 60 * time.Second // one request, including a server-side fill or check of 1 GiB
	helloTimeout  = 10 * time.Second
	attachTimeout = 10 * time.Second
	// sessionIdleTimeout is how long a server waits for a session's next
	// request: a client that stopped (killed without a FIN, suspended,
	// cut off by a firewall) frees the server, which serves one client at
	// a time, after it. A client pings every keepaliveEvery while it
	// measures on the engine endpoint and sends no request.
	sessionIdleTimeout = 2 * time.Minute
)

// keepaliveEvery: see sessionIdleTimeout (tests shorten it).
var keepaliveEvery = 20 * time.Second

// Control operations.
const (
	opHello       = "hello"        // -> server environment; busy servers refuse
	opAttach      = "attach"       // the client dialed the engine socket: the server picks up the endpoint
	opAlloc       = "alloc"        // allocate, fill and export a buffer
	opFree        = "free"         // free a buffer
	opVerify      = "verify"       // check a buffer's contents against the pattern
	opPingPong    = "pingpong"     // start the ping-pong responder
	opPingPongEnd = "pingpong_end" // wait for the responder (stopped by the client's stop sequence) and check
	opBye         = "bye"          // the client is done
	opPing        = "ping"         // the client is alive (it measures and has no request)
)

// ctlMsg is a request or a reply: one JSON line.
type ctlMsg struct {
	Op      string `json:"op,omitempty"`
	Version int    `json:"version,omitempty"`
	Error   string `json:"error,omitempty"` // replies: why the request was refused

	// hello reply
	PID    int          `json:"pid,omitempty"`
	Env    *Environment `json:"env,omitempty"`
	Device int          `json:"device,omitempty"` // the server's Gaudi for gaudi buffers
	Port   int          `json:"port,omitempty"`   // tcp, rdma: the server engine's port, on the control channel's host
	// Transport is the transport the server serves (hello reply: "tcp"
	// or "rdma"; empty from servers that predate rdma: tcp).
	Transport string `json:"transport,omitempty"`

	// buffers
	Buf        uint64 `json:"buf,omitempty"` // server buffer id
	Mem        Mem    `json:"mem,omitempty"`
	Size       int    `json:"size,omitempty"`
	Seed       byte   `json:"seed,omitempty"`
	Complement bool   `json:"complement,omitempty"` // fill with the pattern's complement
	Key        []byte `json:"key,omitempty"`        // an exported remote key
	HasSeq     bool   `json:"has_seq,omitempty"`    // the buffer carries a ping-pong sequence at SeqOff
	SeqOff     int    `json:"seq_off,omitempty"`
	Seq        uint64 `json:"seq,omitempty"`    // the sequence the buffer must hold
	Rounds     uint64 `json:"rounds,omitempty"` // ping-pong rounds the server answered
}

// ctlConn is one end of a control connection.
type ctlConn struct {
	c  net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
	to string // who is at the other end, for errors
	// aborted: abort was called. Reads and writes check it after setting
	// their deadline, which may have replaced abort's.
	aborted atomic.Bool
	// failed is the error of the first call that ended without its reply
	// (the cause of aborted, wrapped in the errors of the calls after it).
	failed atomic.Pointer[error]
}

// errAborted: the connection was aborted (ctlConn.abort).
var errAborted = errors.New("aborted")

func newCtlConn(c net.Conn, to string) *ctlConn {
	return &ctlConn{c: c, r: bufio.NewReaderSize(c, 4096), w: bufio.NewWriter(c), to: to}
}

func (c *ctlConn) Close() error { return c.c.Close() }

// abort makes the reads and writes in progress, and every later one,
// fail at once.
func (c *ctlConn) abort() {
	c.aborted.Store(true)
	_ = c.c.SetDeadline(time.Unix(1, 0))
}

// send writes one message within timeout (0: no limit).
func (c *ctlConn) send(m *ctlMsg, timeout time.Duration) error {
	var d time.Time
	if timeout > 0 {
		d = time.Now().Add(timeout)
	}
	if err := c.c.SetWriteDeadline(d); err != nil {
		return err
	}
	if c.aborted.Load() {
		return fmt.Errorf("send to %s: %w", c.to, errAborted)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := c.w.Write(b); err != nil {
		return fmt.Errorf("send to %s: %w", c.to, err)
	}
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("send to %s: %w", c.to, err)
	}
	return nil
}

// recv reads one message within timeout (0: no limit). A line longer
// than ctlMaxLine or that is not a JSON object is an error.
func (c *ctlConn) recv(timeout time.Duration) (*ctlMsg, error) {
	var d time.Time
	if timeout > 0 {
		d = time.Now().Add(timeout)
	}
	if err := c.c.SetReadDeadline(d); err != nil {
		return nil, err
	}
	if c.aborted.Load() {
		return nil, fmt.Errorf("receive from %s: %w", c.to, errAborted)
	}
	var line []byte
	for {
		part, err := c.r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > ctlMaxLine {
			return nil, fmt.Errorf("from %s: control message longer than %d bytes", c.to, ctlMaxLine)
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil, io.EOF
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if timeout == 0 {
				return nil, fmt.Errorf("connection to %s aborted", c.to)
			}
			return nil, fmt.Errorf("no answer from %s within %v: %w", c.to, timeout, err)
		}
		return nil, fmt.Errorf("receive from %s: %w", c.to, err)
	}
	var m ctlMsg
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("from %s: malformed control message: %w", c.to, err)
	}
	return &m, nil
}

// call sends a request and returns its reply; a refusal is an error.
// ctx ends the wait early. A call that ends without its reply (ctx, a
// timeout, a broken connection) leaves the connection unusable: its next
// line could be the late reply, so every later call fails at once
// (errAborted, wrapped with the first failed call's error).
func (c *ctlConn) call(ctx context.Context, m *ctlMsg, timeout time.Duration) (*ctlMsg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.aborted.Load() {
		if cause := c.failed.Load(); cause != nil {
			return nil, fmt.Errorf("%s: the control connection to %s is unusable (%w) after an earlier request failed: %w", m.Op, c.to, errAborted, *cause)
		}
		return nil, fmt.Errorf("%s: the control connection to %s is unusable after an earlier request was cancelled or failed: %w", m.Op, c.to, errAborted)
	}
	// abort, not a bare past deadline: send and recv set their own
	// deadline, which would replace it, then check aborted. A cancel
	// that comes once the reply was read whole leaves nothing pending:
	// ended keeps a late one from aborting, and one that came during
	// the last read is undone.
	var mu sync.Mutex
	ended := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			c.abort()
		}
	})
	defer stop()
	if err := c.send(m, timeout); err != nil {
		c.abort()
		return nil, c.fail(ctxOr(ctx, fmt.Errorf("%s: %w", m.Op, err)))
	}
	r, err := c.recv(timeout)
	mu.Lock()
	ended = true
	if err == nil {
		c.aborted.Store(false) // the next send and recv set their deadlines
	}
	mu.Unlock()
	if err != nil {
		c.abort()
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%s closed the control connection", c.to)
		}
		return nil, c.fail(ctxOr(ctx, fmt.Errorf("%s: %w", m.Op, err)))
	}
	if r.Error != "" {
		return r, fmt.Errorf("%s refused %s: %s", c.to, m.Op, r.Error)
	}
	return r, nil
}

// fail keeps err as the connection's first failure and returns it.
func (c *ctlConn) fail(err error) error {
	c.failed.CompareAndSwap(nil, &err)
	return err
}

func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// peerUcred returns the credentials of the process at the other end of a
// unix socket.
func peerUcred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// maxSocketPath is the longest socket path (sun_path holds 108 bytes with
// the terminating NUL); the control socket's path is longer by CtlSuffix.
const maxSocketPath = 107 - len(CtlSuffix)

func checkSocketPath(path string) error {
	switch {
	case path == "":
		return errors.New("empty socket path")
	case path[0] == '@':
		return fmt.Errorf("abstract socket %q not supported (no file permissions)", path)
	case len(path) > maxSocketPath:
		return fmt.Errorf("socket path of %d bytes is too long (max %d, the control socket adds %q)", len(path), maxSocketPath, CtlSuffix)
	}
	return nil
}

// ParseTransport parses the -x value of gxfer perf: "local", "unix:PATH"
// for the ipc transport to the server listening at PATH,
// "tcp:HOST:PORT" for the tcp transport to the server whose control
// channel is at HOST:PORT, or "rdma:HOST:PORT" for the same over RDMA
// (the control channel stays TCP). It returns the transport name and the
// address ("" for local; PATH; HOST:PORT). Known but unavailable
// transports are errors matching ErrUnavailable; rdma's availability is
// not checked here (see NoteRDMA).
func ParseTransport(s string) (name, addr string, err error) {
	if rest, ok := strings.CutPrefix(s, "unix:"); ok {
		if err := checkSocketPath(rest); err != nil {
			return "", "", fmt.Errorf("bad -x %q: %w", s, err)
		}
		if _, err := LookupTransport("ipc"); err != nil {
			return "", "", err
		}
		return "ipc", rest, nil
	}
	if rest, ok := strings.CutPrefix(s, "tcp:"); ok {
		if err := checkHostPort(rest); err != nil {
			return "", "", fmt.Errorf("bad -x %q: %w", s, err)
		}
		if _, err := LookupTransport("tcp"); err != nil {
			return "", "", err
		}
		return "tcp", rest, nil
	}
	// rdma:HOST:PORT: the address is checked here; whether this machine
	// can use RDMA is the engine's to say (NoteRDMA, then
	// LookupTransport("rdma")), once it is open.
	if rest, ok := strings.CutPrefix(s, "rdma:"); ok {
		if err := checkHostPort(rest); err != nil {
			return "", "", fmt.Errorf("bad -x %q: %s", s, strings.ReplaceAll(err.Error(), "tcp:HOST:PORT", "rdma:HOST:PORT"))
		}
		return "rdma", rest, nil
	}
	switch s {
	case "ipc":
		return "", "", errors.New("transport ipc needs the server's socket: -x unix:PATH")
	case "tcp":
		return "", "", errors.New("transport tcp needs the server's address: -x tcp:HOST:PORT")
	case "rdma":
		return "", "", errors.New("transport rdma needs the server's address: -x rdma:HOST:PORT (the control channel; the data moves by RDMA)")
	}
	if _, err := LookupTransport(s); err != nil {
		return "", "", err
	}
	return s, "", nil
}

// checkHostPort checks a tcp address, HOST:PORT ([V6ADDR]:PORT): a port
// number 0..65535 is required (0, an ephemeral port, is for servers
// only, see CheckDialAddr); an empty host (":PORT") means every
// interface for a server and this host for a client.
func checkHostPort(hp string) error {
	if hp == "" {
		return errors.New("want tcp:HOST:PORT")
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			if ae.Err == "missing port in address" {
				return fmt.Errorf("missing port in %q (want tcp:HOST:PORT)", hp)
			}
			return fmt.Errorf("%s in %q (want tcp:HOST:PORT; IPv6 as [ADDR]:PORT)", ae.Err, hp)
		}
		return err
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("bad host %q", host)
	}
	if port == "" {
		return fmt.Errorf("missing port in %q (want tcp:HOST:PORT)", hp)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("bad port %q (want a number 0..65535)", port)
	}
	return nil
}

// CheckDialAddr checks the address a client dials: HOST:PORT with a
// port above 0.
func CheckDialAddr(hp string) error {
	if err := checkHostPort(hp); err != nil {
		return err
	}
	// The number, not the text: "00" and "+0" are port 0 too.
	if _, port, _ := net.SplitHostPort(hp); port != "" {
		if n, err := strconv.Atoi(port); err == nil && n == 0 {
			return errors.New("port 0 is for servers (an ephemeral port): give the server's port")
		}
	}
	return nil
}
