package ctrlchan

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// Application messages through a shared-memory ring (Config.MsgRing, a
// unix socket whose peer announced wire.CapMsgRing): as the channel
// starts, each side grants its window as a ring (wire.MsgRing, ring.go)
// instead of a MsgCredit, and its peer's Sends write into that ring on
// their own goroutine; Recv takes from it on its own. No frame travels
// per message while the receiver is polling (a Recv polls for WaitSpin
// before parking); a parked receiver, or a sender waiting for credit,
// sets its flag in the ring and is woken by a MsgBell on the socket. The
// credit is the same as on the socket (a window of messages and bytes,
// returned in quarters), written into the ring's header.
//
// Order: one Send at a time writes into the ring, and a message is
// written only after the caller's earlier Puts completed (on unix the
// bytes are then in the owner's memory), so the receiver sees the bytes
// before it can see the message.
//
// On failure the messages still in the ring are moved to the queue (Recv
// returns them, then the error) and both rings are unmapped: no ring
// memory is touched after that (Recv polls and takes under mu, Send
// writes under txMu).

// grantRing grants the window as a ring; false when no ring could be
// made (the caller grants credit instead: the peer then sends on the
// socket). The MsgRing goes out first thing on the writer (sendGrant):
// Start must not block on a peer that does not read.
func (c *Chan) grantRing() bool {
	m := &c.msg
	size := ringSize(m.window, m.windowBytes)
	sh, err := ipc.NewShared(int(ringHdr+size), "gxfer-msgring")
	if err != nil {
		c.log.Debug().Err(err).Str("peer", c.cfg.Name).Msg("no message ring; messages go on the socket")
		return false
	}
	// The writer sends its own descriptor: the ring's is closed when the
	// channel fails, maybe while the writer sends.
	dup, err := sh.FD().Dup()
	if err != nil {
		_ = sh.Close()
		c.log.Debug().Err(err).Str("peer", c.cfg.Name).Msg("no message ring; messages go on the socket")
		return false
	}
	m.mu.Lock()
	m.rx, m.rxMem, m.ringGranted = &rxRing{ringMem: newRingMem(sh.Bytes(), size)}, sh, true
	m.allowN, m.allowB = m.window, m.windowBytes
	m.grant = &wire.MsgRing{Msgs: uint32(m.window), Bytes: m.windowBytes, Size: size}
	m.grantFD = dup
	m.mu.Unlock()
	return true
}

// sendGrant sends the MsgRing grantRing prepared (on the writer, before
// anything else it sends).
func (c *Chan) sendGrant() {
	m := &c.msg
	m.mu.Lock()
	g, f := m.grant, m.grantFD
	m.grant, m.grantFD = nil, nil
	m.mu.Unlock()
	if g == nil {
		return
	}
	if c.Err() == nil {
		if err := c.c.Send(g, f); err != nil {
			c.Fail(c.PeerErr("message ring", err))
		}
	}
	if err := f.Close(); err != nil {
		c.log.Debug().Err(err).Msg("message ring descriptor not closed")
	}
}

// ringIn takes the peer's MsgRing on the reader: the ring this side's
// messages go into from now on.
func (c *Chan) ringIn(f *wire.Frame) error {
	defer func() { _ = f.CloseFDs() }()
	var mr wire.MsgRing
	if err := mr.DecodePayload(f.Header, f.Payload); err != nil {
		return err
	}
	if !c.cfg.MsgRing {
		return errors.New("a message ring on a connection without them")
	}
	if !validRingSize(mr.Size, uint64(mr.Msgs), mr.Bytes) {
		return fmt.Errorf("message ring of %d bytes for a window of %d messages, %d bytes", mr.Size, mr.Msgs, mr.Bytes)
	}
	mp, err := ipc.MapShared(f.FDs[0], int(ringHdr+mr.Size))
	if err != nil {
		return fmt.Errorf("message ring: %w", err)
	}
	m := &c.msg
	m.txMu.Lock()
	if m.tx != nil || m.txFailed {
		dup := m.tx != nil
		m.txMu.Unlock()
		_ = mp.Close()
		if dup {
			return errors.New("a second message ring")
		}
		return nil
	}
	m.tx = &txRing{ringMem: newRingMem(mp.Bytes(), mr.Size), grantN: uint64(mr.Msgs), grantB: mr.Bytes}
	m.txMap = mp
	m.txMu.Unlock()
	wake(m.credit)
	return nil
}

// bellIn takes a MsgBell on the reader: wakes a parked Recv and a Send
// waiting for credit (they look at the rings).
func (c *Chan) bellIn(f *wire.Frame) error {
	var mb wire.MsgBell
	if err := mb.DecodePayload(f.Header, f.Payload); err != nil {
		return err
	}
	if !c.cfg.MsgRing {
		return errors.New("a message bell on a connection without rings")
	}
	c.MarkActive() // a peer ringing is exchanging messages, not idle
	wake(c.msg.arrived)
	wake(c.msg.credit)
	return nil
}

// ringSend writes b into the peer's ring when there is one: done says
// whether it did (or failed: err); not done, the caller waits for credit
// (the ring's flag is set: the peer rings when it returns some). Once in
// the ring the message is sent, whatever becomes of its bell: one that
// ctx kept from going out goes on the writer.
func (c *Chan) ringSend(ctx context.Context, b []byte) (done bool, err error) {
	m := &c.msg
	m.txMu.Lock()
	t := m.tx
	if t == nil {
		m.txMu.Unlock()
		return false, nil
	}
	ok, err := t.fits(len(b))
	if err == nil && !ok {
		t.flag(offTxWait).Store(1)
		ok, err = t.fits(len(b)) // returned as the flag went up
	}
	if err != nil {
		m.txMu.Unlock()
		c.Fail(c.PeerErr("message ring", err))
		return true, c.Err()
	}
	if !ok {
		m.txMu.Unlock()
		return false, nil
	}
	t.push(b)
	// push's last store is a full barrier: the flag is read after the
	// tail is published (a Recv parking sets the flag, then reads the
	// tail: one of the two sees the other).
	rx := t.flag(offRxWait)
	bell := rx.Load() == 1 && rx.CompareAndSwap(1, 0)
	m.txMu.Unlock()
	m.out.Add(1)
	m.outB.Add(uint64(len(b)))
	if bell {
		m.bells.Add(1)
		byCtx, broken, err := c.sendCtx(ctx, &wire.MsgBell{})
		switch {
		case err == nil || broken: // broken: sendCtx failed the channel
		case byCtx:
			// Nothing went out: the writer rings once the peer reads.
			if err := c.QueueReply(&wire.MsgBell{}); err != nil {
				c.Fail(c.PeerErr("message bell", err))
			}
		default:
			// The peer's parked Recv would never wake (its flag is
			// cleared): the channel fails, and the peer, seeing it,
			// takes the messages left in its ring (msgFailed).
			c.Fail(c.SendErr(err))
		}
	}
	return true, nil
}

// txRinged reports whether this side's messages go through a ring.
func (m *msgs) txRinged() bool {
	m.txMu.Lock()
	defer m.txMu.Unlock()
	return m.tx != nil
}

// txCredit is the credit left in the peer's ring (ok false: no ring).
func (m *msgs) txCredit() (n, b uint64, ok bool) {
	m.txMu.Lock()
	defer m.txMu.Unlock()
	if m.tx == nil {
		return 0, 0, false
	}
	n, b, _, err := m.tx.credit()
	if err != nil {
		return 0, 0, true
	}
	return n, b, true
}

// popLocked takes the next message out of the ring (m.rx), within the
// credit granted.
func (m *msgs) popLocked() ([]byte, bool, error) {
	b, ok, err := m.rx.pop()
	if err != nil || !ok {
		return nil, false, err
	}
	n := uint64(len(b))
	if m.allowN == 0 || m.allowB < n {
		return nil, false, fmt.Errorf("application message of %d bytes beyond the credit granted (%d messages, %d bytes left)", n, m.allowN, m.allowB)
	}
	m.allowN--
	m.allowB -= n
	m.in.Add(1)
	m.inBytes.Add(n)
	return b, true, nil
}

// spinRing polls the ring until something arrived or the channel ended
// (true: the caller looks), or until ctx ends or until passes (false: the
// caller parks, and sees ctx's end). It yields its P now and then: the
// sender may be waiting for one.
func (c *Chan) spinRing(ctx context.Context, until time.Time) bool {
	m := &c.msg
	if m.spin <= 0 {
		return false
	}
	for i := 1; ; i++ {
		m.mu.Lock()
		there := m.rx == nil || len(m.q) > 0 || m.rx.pending()
		m.mu.Unlock()
		if there {
			return true
		}
		if i&7 != 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return false
		case <-c.done:
			return true
		default:
		}
		if i&63 != 0 {
			continue
		}
		if time.Now().After(until) {
			return false
		}
		runtime.Gosched()
	}
}

// parkRx announces in the ring that a Recv parks (the peer's next
// message comes with a bell); true: something arrived meanwhile.
func (m *msgs) parkRx() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rx == nil || len(m.q) > 0 {
		return true
	}
	m.rx.flag(offRxWait).Store(1)
	return m.rx.pending()
}

// arrivedIn counts the messages that arrived: taken, queued, and still in
// the ring (as the peer counts them, within the window).
func (m *msgs) arrivedIn() (n, b uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, b = m.in.Load(), m.inBytes.Load()
	if m.rx != nil {
		if tn, tb := m.rx.arrived(); tn >= n && tn-n <= m.window && tb >= b && tb-b <= m.windowBytes {
			n, b = tn, tb
		}
	}
	return n, b
}

// msgFailed marks the failure (c.failed set): messages arriving from now
// on are dropped, and Recv returns the error once the queue is empty. The
// messages in this side's ring are queued first, and the rings unmapped.
func (c *Chan) msgFailed() {
	m := &c.msg
	m.mu.Lock()
	if m.rx != nil {
		for {
			b, ok, err := m.popLocked()
			if err != nil || !ok {
				break
			}
			m.q = append(m.q, b)
		}
		m.rx = nil
		if err := m.rxMem.Close(); err != nil {
			c.log.Warn().Err(err).Msg("message ring not released")
		}
		m.rxMem = nil
	}
	m.failed = true
	m.mu.Unlock()
	m.txMu.Lock()
	m.txFailed = true
	if m.txMap != nil {
		m.tx = nil
		if err := m.txMap.Close(); err != nil {
			c.log.Warn().Err(err).Msg("peer's message ring not unmapped")
		}
		m.txMap = nil
	}
	m.txMu.Unlock()
}
