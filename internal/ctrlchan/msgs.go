package ctrlchan

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// The window a receiver grants by default: messages and bytes its peer
// may send that its application has not taken yet.
const (
	MsgWindow      = 256
	MsgWindowBytes = 4 << 20
)

// msgs is a channel's application messages (wire.AppMsg) under credit
// flow control (wire.MsgCredit):
//
//   - receiving: the reader copies each message into the queue Recv takes
//     from, never waiting. The queue is bounded by the window this side
//     granted: a message beyond the peer's credit is a protocol violation
//     that fails the channel, so nothing unbounded is ever allocated.
//     Taken messages are returned to the peer as credit in batches (a
//     quarter of the window, so that a sender waits only while the
//     receiver has messages queued), through the writer.
//   - sending: Send spends credit, waiting (bounded by ctx) while there is
//     none; one Send at a time goes out, so calls that do not overlap
//     reach the peer in their order.
type msgs struct {
	window, windowBytes uint64

	mu sync.Mutex
	// receiving
	q                      [][]byte // arrived, not taken
	failed                 bool     // the channel failed: nothing is queued any more
	allowN, allowB         uint64   // what the peer may still send
	takenN, takenB         uint64   // taken, not yet returned as credit
	arrived                chan struct{}
	waiting                int // WaitMsg calls parked on arrived
	in, inBytes, out, outB atomic.Uint64
	// receiving through a ring (msgring.go): the ring this side granted
	// (nil when it granted credit, and once the channel failed)
	rx          *rxRing
	rxMem       *ipc.Shared
	ringGranted bool // this side granted a ring: no AppMsg on the socket
	grant       *wire.MsgRing
	grantFD     *fd.FD        // the ring's memfd, duplicated, for the writer to send
	spin        time.Duration // how long RecvMsg polls the ring before it parks
	// sending
	credN, credB uint64 // what we may still send
	credit       chan struct{}
	sendSem      chan struct{} // one Send on the connection at a time
	// sending through the ring the peer granted (msgring.go)
	txMu     sync.Mutex
	tx       *txRing
	txMap    *ipc.Mapping
	txFailed bool          // the channel failed: the ring is unmapped
	bells    atomic.Uint64 // messages written while the receiver was parked
}

func (m *msgs) init(window, windowBytes int, spin time.Duration) {
	m.spin = spin
	if window <= 0 {
		window = MsgWindow
	}
	if windowBytes <= 0 {
		windowBytes = MsgWindowBytes
	}
	m.window, m.windowBytes = uint64(window), uint64(max(windowBytes, wire.MaxAppMsg))
	m.arrived = make(chan struct{}, 1)
	m.credit = make(chan struct{}, 1)
	m.sendSem = make(chan struct{}, 1)
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// MsgCapable reports whether the peer exchanges application messages.
func (c *Chan) MsgCapable() bool { return c.cfg.Peer.Caps&wire.CapMessages != 0 }

// grantWindow grants the peer the whole window as the channel starts.
func (c *Chan) grantWindow() {
	if !c.MsgCapable() {
		return
	}
	if c.cfg.MsgRing && c.grantRing() {
		return
	}
	m := &c.msg
	m.mu.Lock()
	m.allowN, m.allowB = m.window, m.windowBytes
	m.mu.Unlock()
	if err := c.QueueReply(&wire.MsgCredit{Msgs: uint32(m.window), Bytes: m.windowBytes}); err != nil {
		c.Fail(c.PeerErr("message credit", err))
	}
}

// msgIn takes an AppMsg frame on the reader: queued within the credit the
// peer holds, else a protocol violation (the error fails the channel).
func (c *Chan) msgIn(f *wire.Frame) error {
	var am wire.AppMsg
	if err := am.DecodePayload(f.Header, f.Payload); err != nil {
		return err
	}
	n := uint64(len(am.Bytes))
	m := &c.msg
	m.mu.Lock()
	if m.ringGranted {
		m.mu.Unlock()
		return fmt.Errorf("an application message on the socket of a connection whose messages go through a ring")
	}
	if m.allowN == 0 || m.allowB < n {
		allowN, allowB := m.allowN, m.allowB
		m.mu.Unlock()
		return fmt.Errorf("application message of %d bytes beyond the credit granted (%d messages, %d bytes left)", n, allowN, allowB)
	}
	m.allowN--
	m.allowB -= n
	m.mu.Unlock()
	// The payload aliases the connection's read buffer: the queue holds a
	// copy, bounded by the window (the caller of Recv owns it).
	b := bytes.Clone(am.Bytes)
	if b == nil {
		b = []byte{}
	}
	m.mu.Lock()
	if m.failed { // arrived after the failure: Recv may have returned the error already
		m.mu.Unlock()
		return nil
	}
	m.q = append(m.q, b)
	m.mu.Unlock()
	m.in.Add(1)
	m.inBytes.Add(n)
	c.MarkActive() // a peer sending messages is not idle (MaxPeers)
	wake(m.arrived)
	return nil
}

// creditIn takes a MsgCredit frame on the reader.
func (c *Chan) creditIn(f *wire.Frame) error {
	var mc wire.MsgCredit
	if err := mc.DecodePayload(f.Header, f.Payload); err != nil {
		return err
	}
	m := &c.msg
	if m.txRinged() {
		return fmt.Errorf("message credit on a connection whose messages go through a ring")
	}
	m.mu.Lock()
	n, b := m.credN+uint64(mc.Msgs), m.credB+mc.Bytes
	if b < m.credB {
		m.mu.Unlock()
		return fmt.Errorf("message credit overflows (%d bytes more on %d)", mc.Bytes, m.credB)
	}
	m.credN, m.credB = n, b
	m.mu.Unlock()
	wake(m.credit)
	return nil
}

// SendMsg sends b (at most wire.MaxAppMsg bytes) to the peer once it
// holds the credit, waiting while ctx lasts (gxerr.Ctx of ctx's error when
// it ends; the message was not sent): for an earlier Send, for credit, and
// for the connection and the write of the message to a peer that does not
// read (a write ctx cut part-way, on a stream, fails the channel, as does
// a message the peer does not take within the write timeout).
// before, when not nil, runs once this Send's turn has come, before it
// waits for credit (the RDMA fence): its error ends the Send.
func (c *Chan) SendMsg(ctx context.Context, b []byte, before func(context.Context) error) error {
	if len(b) > wire.MaxAppMsg {
		return gxerr.New(gxerr.Invalid, fmt.Sprintf("message of %d bytes (max %d)", len(b), wire.MaxAppMsg), nil)
	}
	if !c.MsgCapable() {
		return gxerr.New(gxerr.NotSupported, c.cfg.Name+" does not take application messages", nil)
	}
	m := &c.msg
	select {
	case m.sendSem <- struct{}{}: // the common case: no Send under way
	default:
		select {
		case m.sendSem <- struct{}{}:
		case <-c.done:
			return c.Err()
		case <-ctx.Done():
			return gxerr.Ctx("send: waiting for an earlier Send", ctx.Err())
		}
	}
	defer func() { <-m.sendSem }()
	if err := c.Err(); err != nil {
		return err
	}
	if before != nil {
		if err := before(ctx); err != nil {
			return err
		}
	}
	n := uint64(len(b))
	for {
		if c.closing.Load() {
			// Close began: its Bye may be out, and the peer reads
			// nothing behind it (Close keeps the channel up a while
			// for the acknowledgements: see linger).
			return closedErr()
		}
		if done, err := c.ringSend(ctx, b); done {
			return err
		}
		m.mu.Lock()
		if m.credN > 0 && m.credB >= n {
			m.credN--
			m.credB -= n
			m.mu.Unlock()
			break
		}
		m.mu.Unlock()
		select {
		case <-m.credit:
		case <-c.done:
			return c.Err()
		case <-ctx.Done():
			return gxerr.Ctx("send: waiting for the peer to take earlier messages", ctx.Err())
		}
	}
	if byCtx, broken, err := c.sendCtx(ctx, &wire.AppMsg{Bytes: b}); err != nil {
		if !byCtx {
			// Not taken within the write timeout (or the connection is
			// gone): the peer never gets the message, nor returns its
			// credit. Going on would shrink the window for good: the
			// channel fails, as for a reply or heartbeat not sent (once
			// its reader is done, when the peer is gone: see Fail).
			serr := c.SendErr(err)
			c.Fail(serr)
			if ferr := c.Err(); ferr != nil {
				return ferr
			}
			return serr
		}
		if !broken { // nothing went out: the credit is not spent
			m.mu.Lock()
			m.credN++
			m.credB += n
			m.mu.Unlock()
		}
		return gxerr.Ctx("send: writing to the peer", ctx.Err())
	}
	m.out.Add(1)
	m.outB.Add(n)
	return nil
}

// RecvMsg returns the next message of the peer, waiting while ctx lasts
// (gxerr.Ctx of ctx's error when it ends). Once the channel has failed, the messages
// that arrived are still returned, then the channel's error.
//
// With a message ring, RecvMsg takes the messages out of it on its own
// goroutine; while none is there it polls the ring for the Env's WaitSpin
// before it parks, announcing it in the ring so that the next message
// comes with a MsgBell.
func (c *Chan) RecvMsg(ctx context.Context) ([]byte, error) {
	for {
		b, ok, err := c.TryRecvMsg()
		if err != nil || ok {
			return b, err
		}
		if err := c.WaitMsg(ctx); err != nil {
			return nil, err
		}
	}
}

// TryRecvMsg takes the next message if one arrived; ok is false when none
// is there yet. Once the channel has failed and no message is left, it
// returns the channel's error.
func (c *Chan) TryRecvMsg() (b []byte, ok bool, err error) {
	m := &c.msg
	for {
		m.mu.Lock()
		b, ok, err := m.nextLocked()
		if err != nil {
			m.mu.Unlock()
			c.Fail(c.PeerErr("message ring", err))
			continue
		}
		if !ok {
			failed := m.failed
			m.mu.Unlock()
			if failed {
				return nil, false, c.Err()
			}
			return nil, false, nil
		}
		ret, bell, more := m.takeLocked(b)
		m.mu.Unlock()
		c.MarkActive() // the peer sent it (a ring's messages come without a frame)
		if more {
			wake(m.arrived) // another Recv may be waiting
		}
		if ret != nil && c.Err() == nil {
			if err := c.QueueReply(ret); err != nil {
				c.Fail(c.PeerErr("message credit", err))
			}
		}
		if bell && c.Err() == nil {
			if err := c.QueueReply(&wire.MsgBell{}); err != nil {
				c.Fail(c.PeerErr("message credit", err))
			}
		}
		return b, true, nil
	}
}

// WaitMsg waits while ctx lasts until a message is there to take (or the
// channel failed), taking none: as RecvMsg waits, polling a message ring
// for the Env's WaitSpin before it parks.
func (c *Chan) WaitMsg(ctx context.Context) error {
	m := &c.msg
	var spinUntil time.Time
	for {
		m.mu.Lock()
		there := m.failed || len(m.q) > 0 || (m.rx != nil && m.rx.pending())
		ring := m.rx != nil
		others := m.waiting > 0
		m.mu.Unlock()
		if there {
			// The one wake-up (a bell, whose flag the producer
			// cleared, or a queued message's) may have come to us; another
			// waiter parked must look again (and re-arm the ring's flag).
			if others {
				wake(m.arrived)
			}
			return nil
		}
		if ring {
			if spinUntil.IsZero() {
				spinUntil = time.Now().Add(m.spin)
			}
			if c.spinRing(ctx, spinUntil) || m.parkRx() {
				continue
			}
		}
		m.mu.Lock()
		m.waiting++
		m.mu.Unlock()
		var ctxErr error
		select {
		case <-m.arrived:
		case <-c.done:
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
		m.mu.Lock()
		m.waiting--
		m.mu.Unlock()
		if ctxErr != nil {
			return gxerr.Ctx("recv", ctxErr)
		}
	}
}

// nextLocked takes the next message that arrived: queued, or in the ring
// (within the credit granted; an error when the peer broke either).
func (m *msgs) nextLocked() ([]byte, bool, error) {
	if len(m.q) > 0 {
		b := m.q[0]
		m.q[0] = nil
		m.q = m.q[1:]
		return b, true, nil
	}
	if m.rx == nil {
		return nil, false, nil
	}
	return m.popLocked()
}

// takeLocked counts b as taken; a quarter of the window taken is returned
// to the peer: as a MsgCredit for the caller to send (ret), or in the
// ring (bell: the peer waits for it, the caller rings). more: another
// message is there.
func (m *msgs) takeLocked(b []byte) (ret *wire.MsgCredit, bell, more bool) {
	m.takenN++
	m.takenB += uint64(len(b))
	// A quarter of the window, in messages or bytes; in bytes at the
	// latest when what is left of the window could no longer hold the
	// largest message (a small window).
	if m.takenN >= max(m.window/4, 1) || m.takenB >= min(m.windowBytes/4, m.windowBytes-wire.MaxAppMsg) {
		if m.rx != nil {
			m.rx.ret(m.takenN, m.takenB)
			bell = m.rx.flag(offTxWait).CompareAndSwap(1, 0)
		} else {
			ret = &wire.MsgCredit{Msgs: uint32(m.takenN), Bytes: m.takenB}
		}
		// Granted before it is sent: the peer may spend it at once.
		m.allowN += m.takenN
		m.allowB += m.takenB
		m.takenN, m.takenB = 0, 0
	}
	more = len(m.q) > 0 || (m.rx != nil && m.rx.pending())
	return ret, bell, more
}

// MsgCredit is what this side may still send before the peer returns
// credit: messages and bytes.
func (c *Chan) MsgCredit() (msgs, bytes uint64) {
	if n, b, ok := c.msg.txCredit(); ok {
		return n, b
	}
	c.msg.mu.Lock()
	defer c.msg.mu.Unlock()
	return c.msg.credN, c.msg.credB
}

// MsgRing reports whether this side's messages go through the ring its
// peer granted (wire.MsgRing).
func (c *Chan) MsgRing() bool { return c.msg.txRinged() }

// MsgStats are a channel's application message counters.
type MsgStats struct {
	Out, OutBytes, In, InBytes uint64
	// Bells counts the messages sent through a ring whose receiver was
	// parked (each followed by a MsgBell on the socket).
	Bells uint64
}

// MsgStats returns the messages sent and received (arrived) so far.
func (c *Chan) MsgStats() MsgStats {
	m := &c.msg
	in, inB := m.arrivedIn()
	return MsgStats{Out: m.out.Load(), OutBytes: m.outB.Load(), In: in, InBytes: inB, Bells: m.bells.Load()}
}
