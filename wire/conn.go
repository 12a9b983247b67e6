package wire

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/fd"
)

// Transport moves whole frames between two peers. ipc.Conn (a unix
// SOCK_SEQPACKET socket that carries fds) and [StreamTransport] (any byte
// stream, e.g. TCP) implement it.
//
// Send transmits one frame and the given descriptors atomically; it does
// not take ownership of fds (the kernel duplicates them into the message;
// the caller still closes its own). Transports that cannot carry fds fail
// with ErrFDsNotSupported when fds is not empty. Send may be called from
// several goroutines; each frame is sent whole.
//
// Recv receives one frame into buf and returns its length and the
// descriptors that came with it, which the caller then owns. A frame
// larger than buf is an error (nothing of it is returned and no fd is
// leaked). Recv is called by one goroutine at a time.
//
// Close unblocks pending Send and Recv calls; it is idempotent.
//
// Transports that also implement SetReadDeadline(time.Time) error (and
// SetWriteDeadline) get read timeouts and context cancellation from
// [Conn].
type Transport interface {
	Send(frame []byte, fds []*fd.FD) error
	Recv(buf []byte) (n int, fds []*fd.FD, err error)
	Close() error
}

type readDeadliner interface{ SetReadDeadline(time.Time) error }
type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

// ConnConfig configures a [Conn].
type ConnConfig struct {
	// MaxFrame bounds frames received and sent, header included (0 means
	// MaxFrame; clamped into [HeaderSize, MaxFrameLimit]). The receive
	// buffer is this large, allocated by NewConn.
	MaxFrame int
	// ReadTimeout, if > 0, bounds each Recv (when the transport supports
	// deadlines) to between 7/8 of it and all of it: the deadline set
	// for one Recv is kept for the next ones until it is an eighth of
	// ReadTimeout short. A context deadline that comes first wins.
	ReadTimeout time.Duration
	// WriteTimeout, if > 0, bounds each Send (when the transport supports
	// write deadlines) to between 7/8 of it and all of it, as ReadTimeout
	// does Recv.
	WriteTimeout time.Duration
}

// Frame is one received frame. Payload aliases the Conn's receive buffer
// and is valid until the next Recv; FDs belong to the receiver, which must
// close them (or hand them on): see [Frame.CloseFDs].
type Frame struct {
	Header  Header
	Payload []byte
	FDs     []*fd.FD
	// Routed is set for a Data frame whose bytes RecvRouted already
	// delivered to its sink (Payload is then empty).
	Routed bool
}

// Decode decodes the frame's payload into m, which must be of the frame's
// type (see [Message.DecodePayload]).
func (f *Frame) Decode(m Message) error { return m.DecodePayload(f.Header, f.Payload) }

// DecodeOrError decodes f into m; a frame that is not one is dropped (its
// fds closed), and the error is the peer's own (*Error) when it sent an
// Error instead.
func (f *Frame) DecodeOrError(m Message) error {
	err := f.Decode(m)
	if err == nil {
		return nil
	}
	_ = f.CloseFDs()
	if f.Header.Type == TypeError {
		var pe Error
		if f.Decode(&pe) == nil {
			return &pe
		}
	}
	return err
}

// Message decodes the frame's payload into a new message of its type.
func (f *Frame) Message() (Message, error) {
	m := NewMessage(f.Header.Type)
	if m == nil {
		return nil, malformed("unknown message type %d", f.Header.Type)
	}
	if err := m.DecodePayload(f.Header, f.Payload); err != nil {
		return nil, err
	}
	return m, nil
}

// CloseFDs closes every descriptor of the frame and forgets them. Call it
// unless the descriptors were taken.
func (f *Frame) CloseFDs() error {
	err := closeFDs(f.FDs)
	f.FDs = nil
	return err
}

func closeFDs(fds []*fd.FD) error {
	var errs []error
	for _, f := range fds {
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Conn reads and writes whole frames over a Transport. One goroutine
// receives (Recv); any number send (Send serialises them). Close may be
// called at any time from any goroutine and unblocks both.
type Conn struct {
	t        Transport
	maxFrame int
	rto, wto time.Duration
	rdl      readDeadliner  // nil if the transport has no deadlines
	wdl      writeDeadliner // idem

	rmu     sync.Mutex
	rbuf    []byte
	rdlZero bool      // the transport's read deadline is known to be unset
	rdlAt   time.Time // the read deadline set from ReadTimeout alone, if that is the one set
	vec     [][]byte  // the reader's: where a routed payload goes
	// sink is RecvRouted's while it reads; routeFn is c.route, made once
	// (a closure made per call would be allocated per frame).
	sink    DataSink
	routeFn func(head []byte, n int) ([][]byte, error)
	sinkV   atomic.Pointer[DataSinkV]

	wmu   chan struct{} // one send at a time (a semaphore: SendCtx may stop waiting)
	wdlAt time.Time     // the write deadline a send set from WriteTimeout (wmu)
	wbuf  []byte
	wv    [][]byte // SendDataV's, under wmu (kept: a list's frame has 17 parts and more)

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// NewConn returns a Conn over t. The Conn owns t: Conn.Close closes it.
func NewConn(t Transport, cfg ConnConfig) *Conn {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = MaxFrame
	}
	cfg.MaxFrame = max(cfg.MaxFrame, HeaderSize)
	if limit := MaxFrameLimit; uint64(cfg.MaxFrame) > limit {
		cfg.MaxFrame = int(limit)
	}
	c := &Conn{t: t, maxFrame: cfg.MaxFrame, rto: cfg.ReadTimeout, wto: cfg.WriteTimeout,
		rbuf: make([]byte, cfg.MaxFrame), wbuf: make([]byte, 0, 512), wmu: make(chan struct{}, 1)}
	c.rdl, _ = t.(readDeadliner)
	c.wdl, _ = t.(writeDeadliner)
	c.routeFn = c.route
	return c
}

// Transport returns the underlying transport.
func (c *Conn) Transport() Transport { return c.t }

// MaxFrame returns the frame limit.
func (c *Conn) MaxFrame() int { return c.maxFrame }

// maxKeptWriteBuf is the largest encode buffer a Conn keeps between sends.
const maxKeptWriteBuf = 64 << 10

// Send encodes m into one frame and sends it with fds, which must number
// m.Type().FDs() (two for ImportReply, one for MsgRing, none otherwise). Send does not take
// ownership of fds. Concurrent Sends are serialised.
func (c *Conn) Send(m Message, fds ...*fd.FD) error {
	c.lockW()
	defer c.unlockW()
	return c.send(context.Background(), m, fds)
}

// SendCtx is Send bounded by ctx too: when ctx ends while the frame
// waits for an earlier Send, or while the transport writes it (its write
// deadline is then moved to the past, when it has one), SendCtx returns
// an error wrapping ctx's error. Nothing of the frame went out then,
// unless the error also matches ErrBroken: a stream transport cut it
// part-way, and the connection is of no further use.
func (c *Conn) SendCtx(ctx context.Context, m Message, fds ...*fd.FD) error {
	select {
	case c.wmu <- struct{}{}: // the common case: no Send under way
	default:
		select {
		case c.wmu <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("wire: send: %w", ctx.Err())
		}
	}
	defer c.unlockW()
	return c.send(ctx, m, fds)
}

// lockW takes the connection for one send (wmu); unlockW gives it back.
func (c *Conn) lockW()   { c.wmu <- struct{}{} }
func (c *Conn) unlockW() { <-c.wmu }

// send is Send and SendCtx with the connection taken (wmu).
func (c *Conn) send(ctx context.Context, m Message, fds []*fd.FD) error {
	if len(fds) != m.Type().FDs() {
		return invalid("%v with %d fds (want %d)", m.Type(), len(fds), m.Type().FDs())
	}
	if c.closed.Load() {
		return ErrClosed
	}
	b, err := AppendFrame(c.wbuf[:0], m)
	if cap(b) <= maxKeptWriteBuf {
		c.wbuf = b[:0]
	}
	if err != nil {
		return err
	}
	if len(b) > c.maxFrame {
		return &detailError{kind: ErrTooLarge, msg: fmt.Sprintf("%v: %d-byte frame exceeds the %d-byte limit", m.Type(), len(b), c.maxFrame)}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wire: send: %w", err)
	}
	if err := c.armWriteDeadline(); err != nil {
		return c.sendErr(err)
	}
	if ctx.Done() != nil && c.wdl != nil {
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			_ = c.wdl.SetWriteDeadline(aLongTimeAgo)
			close(fired)
		})
		defer func() {
			if !stop() {
				<-fired
				_ = c.wdl.SetWriteDeadline(time.Time{}) // a later Send sets its own, if any
				c.wdlAt = time.Time{}
			}
		}()
	}
	if err := c.t.Send(b, fds); err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, os.ErrDeadlineExceeded) && !c.closed.Load() {
			return fmt.Errorf("wire: send: %w (%w)", cerr, err)
		}
		return c.sendErr(err)
	}
	return nil
}

// armWriteDeadline sets the write deadline WriteTimeout from now, unless
// the one a send set before is kept (deadlineKept; wmu held).
func (c *Conn) armWriteDeadline() error {
	if c.wto <= 0 || c.wdl == nil {
		return nil
	}
	d := time.Now().Add(c.wto)
	if deadlineKept(c.wdlAt, d, c.wto) {
		return nil
	}
	c.wdlAt = time.Time{}
	if err := c.wdl.SetWriteDeadline(d); err != nil {
		return err
	}
	c.wdlAt = d
	return nil
}

// deadlineKept reports whether a deadline set earlier from timeout (set;
// zero: none is) stands in for the one due at next: it is at most an
// eighth of timeout earlier. Moving it would cost a timer update per
// frame, on the path from one small message to the next.
func deadlineKept(set, next time.Time, timeout time.Duration) bool {
	return !set.IsZero() && next.Sub(set) < timeout/8
}

func (c *Conn) sendErr(err error) error {
	if c.closed.Load() {
		return ErrClosed
	}
	return fmt.Errorf("wire: send: %w", err)
}

// aLongTimeAgo is a deadline in the past, used to interrupt a read.
var aLongTimeAgo = time.Unix(1, 0)

// Recv receives one frame. It validates the header (magic, version, type,
// reserved fields, length against MaxFrame) and that the frame carries as
// many fds as its header announces; on any error the received fds are
// closed. It does not decode the payload: use [Frame.Decode] or
// [Frame.Message].
//
// ctx cancels the wait (and its deadline bounds it) when the transport
// supports read deadlines; otherwise only Close interrupts Recv. A
// canceled Recv returns ctx's error (context.DeadlineExceeded when ctx's
// deadline passed); one that exceeded ReadTimeout an error matching
// os.ErrDeadlineExceeded. Recv must not be called concurrently.
func (c *Conn) Recv(ctx context.Context) (Frame, error) {
	return c.recv(ctx, func(buf []byte) (int, bool, []*fd.FD, error) {
		n, fds, err := c.t.Recv(buf)
		return n, false, fds, err
	})
}

// recv is Recv with the transport read given by read (which reports
// whether the frame's payload was routed elsewhere).
func (c *Conn) recv(ctx context.Context, read func(buf []byte) (int, bool, []*fd.FD, error)) (Frame, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closed.Load() {
		return Frame{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return Frame{}, err
	}
	ctxBound := false // the transport deadline is ctx's
	if c.rdl != nil {
		var d time.Time
		if c.rto > 0 {
			d = time.Now().Add(c.rto)
		}
		if cd, ok := ctx.Deadline(); ok && (d.IsZero() || cd.Before(d)) {
			d, ctxBound = cd, true
		}
		switch {
		case !ctxBound && c.rto > 0 && deadlineKept(c.rdlAt, d, c.rto):
			// The deadline an earlier Recv set from ReadTimeout stands.
		case !d.IsZero() || !c.rdlZero:
			// A failure here means the transport is closed or broken;
			// its Recv below reports that.
			err := c.rdl.SetReadDeadline(d)
			c.rdlZero = err == nil && d.IsZero()
			c.rdlAt = time.Time{}
			if err == nil && !ctxBound && c.rto > 0 {
				c.rdlAt = d
			}
		}
		if ctx.Done() != nil {
			fired := make(chan struct{})
			stop := context.AfterFunc(ctx, func() {
				_ = c.rdl.SetReadDeadline(aLongTimeAgo)
				close(fired)
			})
			defer func() {
				if !stop() {
					<-fired
					c.rdlZero, c.rdlAt = false, time.Time{}
				}
			}()
		}
	}
	n, routed, fds, err := read(c.rbuf)
	if err != nil {
		_ = closeFDs(fds)
		if ctxBound && errors.Is(err, os.ErrDeadlineExceeded) && !c.closed.Load() &&
			!errors.Is(ctx.Err(), context.Canceled) {
			// ctx's deadline passed (its own timer may not have fired
			// yet). A cancel of ctx also moved the deadline to the past:
			// recvErr reports that one as ctx's error (Canceled).
			return Frame{}, fmt.Errorf("wire: recv: %w (%w)", context.DeadlineExceeded, err)
		}
		return Frame{}, c.recvErr(ctx, err)
	}
	if routed {
		h, err := ParseHeader(c.rbuf[:n], n+MaxDataPayload)
		if err != nil { // validated by the router already
			return Frame{}, err
		}
		return Frame{Header: h, Routed: true}, nil
	}
	h, p, err := DecodeFrame(c.rbuf[:n], c.maxFrame)
	if err == nil && int(h.NumFDs) != len(fds) {
		err = malformed("%v: header announces %d fds, %d received", h.Type, h.NumFDs, len(fds))
	}
	if err != nil {
		_ = closeFDs(fds)
		return Frame{}, err
	}
	return Frame{Header: h, Payload: p, FDs: fds}, nil
}

func (c *Conn) recvErr(ctx context.Context, err error) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if ctx.Err() != nil {
		return fmt.Errorf("wire: recv: %w", context.Cause(ctx))
	}
	return fmt.Errorf("wire: recv: %w", err)
}

// Close closes the transport, unblocking Recv and Send. It is idempotent:
// later calls return the first call's result.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.closeErr = c.t.Close()
	})
	return c.closeErr
}
