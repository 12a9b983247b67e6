// Package ctrlchan is an endpoint's control channel: the connection to
// one peer engine over which requests, replies, heartbeats and (on TCP)
// data travel, once the handshake (internal/handshake) is done.
//
// A Chan is the datapath.Ctrl its data path gets. It owns:
//
//   - request ids: each side issues ids of its own parity (the dialer's
//     are odd), so that a reply or a Data frame names its request
//     unambiguously on a connection both sides send requests on;
//   - the replies this side waits for (Expect, RoundTrip), delivered by
//     the reader;
//   - the reader goroutine: it receives every frame, lands Data frames
//     through the path's sink, hands replies to their waiters and
//     requests to the path, and fails the channel on a malformed frame, a
//     lost connection or a peer silent for PeerTimeout;
//   - the writer goroutine: it sends the replies the reader queued (the
//     reader never writes, so a peer that stops reading cannot stall it)
//     and a heartbeat every PeerTimeout/4;
//   - the endpoint's application messages (msgs.go): queued by the reader
//     within the window this side granted, taken by RecvMsg, which returns
//     their credit; SendMsg spends the peer's credit; on a unix socket
//     they go through shared-memory rings instead (msgring.go);
//   - failure: once, with the first error; pending replies get it, the
//     path is told, Done closes;
//   - Close: says goodbye, fails the channel, and returns once the reader,
//     the writer and every request being served have ended; Evict (a
//     listener making room, bye.go) says goodbye with why, then fails it.
package ctrlchan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// MaxServing bounds the peer's requests a channel serves at once (Serve),
// and the requests with a reply this side has outstanding on it
// (ExpectRequest, RequestSlot): a caller beyond waits for a slot, so that a
// well-behaved peer is never refused for having too many in progress.
// Serve keeps up to MaxServing more requests waiting in a backlog: a
// requester counts a request it cancels out at once, while here it
// winds down, so its next requests may find every slot still taken.
const MaxServing = 64

// Config describes a channel whose handshake is done.
type Config struct {
	Env    datapath.Env
	Conn   *wire.Conn
	Peer   wire.Hello // the peer's Hello
	PeerID ipc.PeerID // the peer's identity on this connection
	Name   string     // names the peer in errors and logs
	Dialer bool       // this side dialed: its request ids are odd
	// MaxReplies bounds the replies the reader may queue for the writer
	// (0: MaxServing); beyond, the peer is not reading and fails.
	MaxReplies int
	// MsgWindow and MsgWindowBytes are the window of application
	// messages this side grants the peer (0: MsgWindow, MsgWindowBytes).
	MsgWindow, MsgWindowBytes int
	// MsgRing: the connection is a unix socket and the peer announced
	// wire.CapMsgRing: each side grants its window as a shared-memory
	// ring (msgring.go).
	MsgRing bool
	// Loops (optional) counts the reader and the writer: Start adds 2,
	// each exit one.
	Loops *sync.WaitGroup
	// OnFail (optional) runs once when the channel fails, after its
	// pending replies got the error and before Done closes.
	OnFail func(err error)
}

// Chan is an endpoint's control channel.
type Chan struct {
	cfg  Config
	env  datapath.Env
	log  zerolog.Logger
	c    *wire.Conn
	path datapath.Path

	mu        sync.Mutex
	pending   map[uint64]datapath.Replier // called once, never under mu
	held      map[uint64]struct{}         // pending requests holding a slot
	slots     chan struct{}               // this side's requests outstanding (ExpectRequest)
	nextID    atomic.Uint64
	parity    uint64 // of our request ids: 1 dialer, 0 acceptor
	failed    error
	hasFailed atomic.Bool
	done      chan struct{}
	once      sync.Once
	serving   sync.WaitGroup
	sem       chan struct{}
	backMu    sync.Mutex            // guards backlog, and sem's release (see Serve)
	backlog   []func() wire.Message // requests waiting for a slot, oldest first
	reader    chan struct{}
	replyMu   sync.Mutex
	replyQ    []wire.Message // the reader's frames, sent by the writer or carried by a sender
	replySig  chan struct{}
	writerEnd chan struct{}
	active    atomic.Bool           // the peer's traffic since the last TakeActivity (MarkActive)
	used      atomic.Bool           // this side's operations since the writer's last report (MarkUsed)
	unsent    atomic.Int64          // Serve replies waiting to be sent
	msg       msgs                  // application messages (msgs.go)
	started   atomic.Bool           // Start ran: the reader runs until reader closes
	closing   atomic.Bool           // Close began: the channel's end is ErrClosed
	evicting  atomic.Pointer[error] // Evict began: the channel's end is this (unless Close's)
	gone      *time.Timer           // mu: fails the channel goneGrace after a send found the peer gone
	// handled is the frame dispatch hands the path (the reader's only):
	// Handle does not keep it, and a copy of its own per frame would
	// move to the heap.
	handled wire.Frame
}

// goneGrace bounds how long a channel whose send found the peer gone
// waits for its reader to reach the end of the stream (see Fail).
const goneGrace = time.Second

var _ datapath.Ctrl = (*Chan)(nil)

// New makes the channel of a connection; Start runs it.
func New(cfg Config) *Chan {
	if cfg.MaxReplies <= 0 {
		cfg.MaxReplies = MaxServing
	}
	c := &Chan{
		cfg: cfg, env: cfg.Env, log: cfg.Env.Logger(), c: cfg.Conn,
		pending:   map[uint64]datapath.Replier{},
		held:      map[uint64]struct{}{},
		slots:     make(chan struct{}, MaxServing),
		done:      make(chan struct{}),
		sem:       make(chan struct{}, MaxServing),
		reader:    make(chan struct{}),
		replySig:  make(chan struct{}, 1),
		writerEnd: make(chan struct{}),
	}
	c.msg.init(cfg.MsgWindow, cfg.MsgWindowBytes, cfg.Env.Config().WaitSpin)
	if cfg.Dialer {
		c.parity = 1
		c.nextID.Store(1)
	}
	return c
}

// Start runs the reader and the writer, p being the channel's data path;
// a channel failed already (Evict, Fail, before it started) is not
// started: its error, p not taken (its Failed not called).
func (c *Chan) Start(p datapath.Path) error {
	c.mu.Lock()
	if c.failed != nil {
		c.mu.Unlock()
		return c.failed
	}
	c.path = p // under mu: Fail and InFlight may run before Start
	c.mu.Unlock()
	var every time.Duration
	if t := c.env.Config().PeerTimeout; t > 0 {
		every = t / 4
	}
	if c.cfg.Loops != nil {
		c.cfg.Loops.Add(2)
	}
	c.started.Store(true)
	c.grantWindow()
	go func() {
		if c.cfg.Loops != nil {
			defer c.cfg.Loops.Done()
		}
		c.writer(every)
	}()
	go func() {
		if c.cfg.Loops != nil {
			defer c.cfg.Loops.Done()
		}
		c.readLoop()
	}()
	return nil
}

func (c *Chan) Env() datapath.Env      { return c.env }
func (c *Chan) Name() string           { return c.cfg.Name }
func (c *Chan) Conn() *wire.Conn       { return c.c }
func (c *Chan) Peer() ipc.PeerID       { return c.cfg.PeerID }
func (c *Chan) PeerHello() *wire.Hello { return &c.cfg.Peer }
func (c *Chan) Dialer() bool           { return c.parity == 1 }
func (c *Chan) Done() <-chan struct{}  { return c.done }

// NewID issues a request id of this side's parity.
func (c *Chan) NewID() uint64 { return c.nextID.Add(2) }

// Ours reports whether request id was issued by this side.
func (c *Chan) Ours(id uint64) bool { return id&1 == c.parity }

// MarkActive records traffic on the endpoint: the peer's requests, Data
// frames and messages, this side's operations on it (MarkUsed). It costs
// an atomic load once marked (a listener takes the mark each few seconds,
// not per frame).
func (c *Chan) MarkActive() {
	if !c.active.Load() {
		c.active.Store(true)
	}
}

// MarkUsed records an operation of this side's on the endpoint (a Put,
// a Get, a message): it is active (MarkActive), and a dialer reports it
// to its listener, which sees no frame of a Put into its memory mapped
// here (see writer). An atomic load once marked.
func (c *Chan) MarkUsed() {
	c.MarkActive()
	if !c.used.Load() {
		c.used.Store(true)
	}
}

// TakeActivity reports whether the endpoint had traffic (MarkActive) since
// the last call, the first since the channel was made, and clears the
// mark. A listener calls it now and then and keeps the time itself: it
// closes the endpoints idle the longest to make room (handshake.Peer).
func (c *Chan) TakeActivity() bool { return c.active.Load() && c.active.Swap(false) }

// InFlight reports whether the channel has work in progress: a request
// of the peer's being served or waiting for a slot (Serve), a request of
// this side's waiting for its reply, or work of the data path's (one
// with an InFlight method: a TCP endpoint landing a Data frame into local
// memory). A listener does not close such an endpoint to make room. It
// takes the channel's locks: not for the hot path.
func (c *Chan) InFlight() bool {
	if len(c.sem) > 0 || len(c.slots) > 0 {
		return true
	}
	c.backMu.Lock()
	backlog := len(c.backlog)
	c.backMu.Unlock()
	c.mu.Lock()
	pending := len(c.pending)
	path := c.path
	c.mu.Unlock()
	if backlog > 0 || pending > 0 {
		return true
	}
	p, ok := path.(interface{ InFlight() bool })
	return ok && p.InFlight()
}

// Err is why the channel ended (nil while it is up).
func (c *Chan) Err() error {
	if !c.hasFailed.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// Serve runs fn on a goroutine (the Env's) within MaxServing requests in
// progress, then sends the reply fn returns (none if nil); Close waits
// for it. The slot is given back before the reply goes out: a requester
// that waits for replies before sending more (ExpectRequest) never finds
// the slots of requests it saw answered still taken.
//
// With every slot taken, fn waits in the backlog (up to MaxServing of
// them) and runs when a slot frees, its slot handed over; beyond that
// Serve refuses it (false). The reader never waits.
func (c *Chan) Serve(fn func() wire.Message) bool {
	select {
	case c.sem <- struct{}{}:
	default:
		// Slots are released under backMu (serveOne): with it held, every
		// slot still taken is released later by a goroutine that first
		// looks at the backlog.
		c.backMu.Lock()
		select {
		case c.sem <- struct{}{}:
			c.backMu.Unlock()
		default:
			if len(c.backlog) >= MaxServing {
				c.backMu.Unlock()
				return false
			}
			c.backlog = append(c.backlog, fn)
			c.serving.Add(1) // Close waits for it too
			c.backMu.Unlock()
			return true
		}
	}
	c.serving.Add(1)
	c.serveOn(fn)
	return true
}

// serveOn runs fn, holding a slot, on a goroutine (see Serve).
func (c *Chan) serveOn(fn func() wire.Message) {
	c.env.Go(func() {
		defer c.serving.Done()
		m := c.serveOne(fn)
		if m == nil {
			return
		}
		// The slot is free again, the reply not sent yet: a peer that
		// does not read must not pile up goroutines (and their replies)
		// beyond the bound of the reply queue.
		if c.unsent.Add(1) > int64(c.cfg.MaxReplies) {
			c.unsent.Add(-1)
			c.Fail(c.PeerErr("reply", errors.New("peer is not reading its replies")))
			return
		}
		err := c.c.Send(m)
		c.unsent.Add(-1)
		if err != nil {
			c.replyNotSent(err)
		}
	})
}

// serveOne runs fn, then hands its slot to the oldest request of the
// backlog (on a goroutine of its own) or gives it back.
func (c *Chan) serveOne(fn func() wire.Message) wire.Message {
	defer func() {
		c.backMu.Lock()
		if len(c.backlog) == 0 {
			<-c.sem
			c.backMu.Unlock()
			return
		}
		next := c.backlog[0]
		c.backlog[0] = nil
		c.backlog = c.backlog[1:]
		c.backMu.Unlock()
		c.serveOn(next) // counted in serving by its Serve
	}()
	return fn()
}

// Fail ends the channel once with err: the connection closes, the path
// is told, pending replies get err.
//
// A send that found the peer gone (SendErr's goneErr: it closed or reset
// the connection) does not end the channel at once while the reader
// runs: what the peer sent before it went, its last messages and its Bye
// among them, may still be unread in the socket, and closing the
// connection would drop it. The reader reads on to the end of the stream,
// which the peer's close makes near, and fails the channel there (with
// the peer's Bye, as a peer that closed); goneGrace bounds the wait, for
// a peer that stopped reading but not writing.
func (c *Chan) Fail(err error) {
	if g, ok := err.(goneErr); ok {
		if c.failLater(g.error) {
			return
		}
		err = g.error
	}
	c.once.Do(func() {
		if c.closing.Load() {
			// Close began: whatever ends the channel now (the peer's
			// answer to our Bye among them) is Close's doing.
			err = closedErr()
		} else if e := c.evicting.Load(); e != nil {
			err = *e // Evict's doing, as for Close
		}
		c.mu.Lock()
		c.failed = err
		c.hasFailed.Store(true)
		path := c.path // nil: not started, and Start will not take one
		if c.gone != nil {
			c.gone.Stop()
		}
		pend := c.pending
		c.pending = map[uint64]datapath.Replier{}
		slots := len(c.held)
		clear(c.held)
		c.mu.Unlock()
		for range slots {
			<-c.slots
		}
		c.msgFailed()
		_ = c.c.Close()
		if path != nil {
			path.Failed(err)
		}
		for _, r := range pend {
			r.Reply(wire.Frame{}, err)
		}
		if c.cfg.OnFail != nil {
			c.cfg.OnFail(err)
		}
		close(c.done)
		if !errors.Is(err, gxerr.Closed) {
			c.log.Warn().Err(err).Str("peer", c.cfg.Name).Msg("endpoint failed")
		}
	})
}

// failLater leaves the failure to the reader, within goneGrace (see
// Fail); false: the reader is not running, the channel fails now.
func (c *Chan) failLater(err error) bool {
	if !c.started.Load() {
		return false
	}
	select {
	case <-c.reader:
		return false
	default:
	}
	c.mu.Lock()
	if c.failed == nil && c.gone == nil {
		c.gone = time.AfterFunc(goneGrace, func() { c.Fail(err) })
	}
	c.mu.Unlock()
	return true
}

// Close says goodbye to the peer (never waiting long for one that does
// not read), fails the channel with gxerr.Closed, and returns once the
// reader, the writer and the requests being served have ended.
// Idempotent; Start must have run.
//
// Over TCP, once the Bye is out, Close waits (closeLinger at most) while
// the peer's kernel has not acknowledged all that was sent: closing a
// TCP socket with frames of the peer unread resets it, and the reset
// drops what the kernel had not sent yet (the last messages, the Bye).
// A peer that reads waits no longer than its acknowledgements take. On
// a unix socket it waits (closeLinger at most) for the peer to hang up
// on the Bye (awaitHangUp): closing it with frames of the peer unread
// makes the peer read a reset before the Bye and what came before it.
func (c *Chan) Close() error {
	c.closing.Store(true)
	sent := c.sayBye(&wire.Bye{}, c.linger)
	c.Fail(closedErr())
	<-sent
	<-c.reader
	<-c.writerEnd
	c.serving.Wait()
	return nil
}

// closedErr is the channel's end once Close has begun.
func closedErr() error { return gxerr.New(gxerr.Closed, "endpoint closed", nil) }

// QueueReply hands a frame the reader wants sent to the writer (or to
// the next Put or Get this side sends, which carries it along).
func (c *Chan) QueueReply(m wire.Message) error {
	c.replyMu.Lock()
	if len(c.replyQ) >= c.cfg.MaxReplies {
		c.replyMu.Unlock()
		return errors.New("peer is not reading its replies")
	}
	c.replyQ = append(c.replyQ, m)
	c.replyMu.Unlock()
	select {
	case c.replySig <- struct{}{}:
	default:
	}
	return nil
}

// TakeReplies removes the queued replies (nil if none).
func (c *Chan) TakeReplies() []wire.Message {
	c.replyMu.Lock()
	q := c.replyQ
	c.replyQ = nil
	c.replyMu.Unlock()
	return q
}

// recycleReplies gives the writer's slice of sent replies back to the
// queue, unless replies were queued meanwhile: a queue taken whole and
// made again cost an allocation per reply.
func (c *Chan) recycleReplies(q []wire.Message) {
	if q == nil {
		return
	}
	clear(q) // the sent messages are not kept alive by the queue's array
	c.replyMu.Lock()
	if c.replyQ == nil {
		c.replyQ = q[:0]
	}
	c.replyMu.Unlock()
}

// replyNotSent fails the channel when a reply or heartbeat could not be
// sent: the peer did not take it within the write timeout (the stream may
// then be cut mid-frame), or the connection is gone. Going on would leave
// the peer's requests unanswered on an endpoint that looks up.
func (c *Chan) replyNotSent(err error) {
	c.log.Debug().Err(err).Str("peer", c.cfg.Name).Msg("reply not sent: the channel fails")
	c.Fail(c.SendErr(err))
}

// writer sends the reader's replies and the heartbeats.
func (c *Chan) writer(every time.Duration) {
	defer close(c.writerEnd)
	c.sendGrant()
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	hb := &wire.Heartbeat{}
	// A dialer's operations may send no frame the peer sees: one-sided
	// RDMA into its memory, Puts and Gets through a mapping of it (unix,
	// a binding's). When it used the endpoint since its last heartbeat,
	// its next one reports it, so that its listener does not close the
	// endpoint as idle (Config.PeerIdleEvict): a Heartbeat with Used,
	// which the peer takes as traffic (dispatch: MarkActive), to a peer
	// that announced wire.CapUseReport (every transport); else, where
	// message rings are, a MsgBell (bellIn: MarkActive; costs the peer a
	// look at its rings, and a bell elsewhere is malformed), which an
	// engine of before CapUseReport takes; else nothing.
	useReport := c.cfg.Peer.Caps&wire.CapUseReport != 0
	report := c.Dialer() && (useReport || c.cfg.MsgRing)
	var used wire.Message = &wire.Heartbeat{Used: true}
	if !useReport {
		used = &wire.MsgBell{}
	}
	for {
		select {
		case <-c.replySig:
			// Let a goroutine that is about to send (the code answering
			// the data just landed) go first and carry the replies.
			runtime.Gosched()
			q := c.TakeReplies()
			for _, m := range q {
				if err := c.c.Send(m); err != nil {
					c.replyNotSent(err)
					return
				}
			}
			c.recycleReplies(q)
		case <-tick:
			var beat wire.Message = hb
			if report && c.used.Load() && c.used.Swap(false) {
				beat = used
			}
			if err := c.c.Send(beat); err != nil {
				c.replyNotSent(err)
				return
			}
			c.path.Tick()
		case <-c.done:
			return
		}
	}
}

func (c *Chan) readLoop() {
	defer close(c.reader)
	defer func() {
		err := c.Err()
		if err == nil {
			err = closedErr()
		}
		c.path.Closed(err)
	}()
	ctx := context.Background()
	sink := c.path.Sink()
	for {
		var (
			f   wire.Frame
			err error
		)
		if sink != nil {
			f, err = c.c.RecvRouted(ctx, sink)
		} else {
			f, err = c.c.Recv(ctx)
		}
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded) && c.Err() == nil:
				c.Fail(gxerr.New(gxerr.Peer, fmt.Sprintf("%s: silent for %v (no frame, not even a heartbeat)", c.cfg.Name, c.env.Config().PeerTimeout), gxerr.Timeout))
			case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrTooLarge):
				c.log.Error().Err(err).Str("peer", c.cfg.Name).Msg("malformed frame; closing the connection")
				c.Fail(c.PeerErr("malformed frame", err))
			default:
				c.Fail(c.PeerErr("connection lost", err))
			}
			return
		}
		if f.Routed {
			c.MarkActive() // a Data frame: the peer is moving data
			c.path.Landed()
			continue
		}
		if err := c.dispatch(f); err != nil {
			_ = f.CloseFDs()
			c.log.Error().Err(err).Str("peer", c.cfg.Name).Msg("malformed frame; closing the connection")
			c.Fail(c.PeerErr("malformed frame", err))
			return
		}
	}
}

// dispatch hands a reply to its waiter and anything else to the path; the
// channel itself takes heartbeats and Bye. An error is the peer's fault.
func (c *Chan) dispatch(f wire.Frame) error {
	switch f.Header.Type {
	case wire.TypeCompletion, wire.TypeError, wire.TypeImportReply, wire.TypeListReply:
		c.mu.Lock()
		r, ok := c.pending[f.Header.RequestID]
		delete(c.pending, f.Header.RequestID)
		slot := c.unholdLocked(f.Header.RequestID)
		c.mu.Unlock()
		if slot {
			<-c.slots
		}
		if !ok {
			return f.CloseFDs() // a reply to a request we gave up on
		}
		// The payload aliases the connection's read buffer, which the next
		// Recv overwrites: a Replier that keeps it copies it.
		r.Reply(f, nil)
		return nil
	// A frame handed on by address is a copy made in its case (g), so that
	// f stays on the stack: a reply, the frame a request waits for, costs
	// no allocation (the path's frame is the channel's, handled).
	case wire.TypeAppMsg:
		g := f
		return c.msgIn(&g)
	case wire.TypeMsgCredit:
		g := f
		return c.creditIn(&g)
	case wire.TypeMsgRing:
		g := f
		return c.ringIn(&g)
	case wire.TypeMsgBell:
		g := f
		return c.bellIn(&g)
	}
	m, err := f.Message()
	if err != nil {
		return err
	}
	c.handled = f
	ok, err := c.path.Handle(&c.handled, m)
	c.handled = wire.Frame{}
	if ok || err != nil {
		return err
	}
	switch m := m.(type) {
	case *wire.Put:
		return fmt.Errorf("a Put with local kind %d, which this endpoint's data path does not serve", m.Local.Kind)
	case *wire.Get:
		return fmt.Errorf("a Get with local kind %d, which this endpoint's data path does not serve", m.Local.Kind)
	case *wire.Invalidate: // imports of a path without any (shm handles its own)
	case *wire.Heartbeat:
		if m.Used {
			if c.cfg.Peer.Caps&wire.CapUseReport == 0 {
				return errors.New("a Heartbeat reporting use from a peer that did not announce it")
			}
			c.MarkActive() // the peer used the endpoint without a frame (see writer)
		}
	case *wire.Bye:
		if m.Reason == "" {
			c.Fail(c.PeerErr("peer closed the endpoint", nil))
			break
		}
		if c.cfg.Peer.Caps&wire.CapByeReason == 0 {
			return errors.New("a Bye with a reason from a peer that did not announce it")
		}
		c.Fail(c.PeerErr(fmt.Sprintf("peer closed the endpoint: %q", m.Reason), nil))
	default:
		return fmt.Errorf("unexpected %v", f.Header.Type)
	}
	return nil
}
