package ctrlchan

import (
	"time"

	"github.com/gxfer/gxfer/wire"
)

// Evict ends the channel as a listener does that closes the endpoint to
// make room for another peer: with PeerErr(what) here, and with a Bye to
// the peer first, carrying what to a peer that announced
// wire.CapByeReason (an empty one to others), so that the peer's error
// says this side closed the endpoint, and why, rather than that the
// connection was lost. It waits for the Bye as Close does, then for the
// peer to hang up on it (see awaitHangUp), not for the reader, the
// writer nor the requests being served. A channel that failed already is
// left as it is.
func (c *Chan) Evict(what string) {
	if c.hasFailed.Load() {
		return
	}
	err := c.PeerErr(what, nil)
	c.evicting.CompareAndSwap(nil, &err)
	bye := &wire.Bye{}
	if c.cfg.Peer.Caps&wire.CapByeReason != 0 {
		bye.Reason = what[:min(len(what), wire.MaxErrorLen)]
	}
	sent := c.sayBye(bye, c.awaitHangUp)
	c.Fail(err)
	<-sent
}

// awaitHangUp waits (closeLinger at most) for the peer to hang up on our
// Bye, as an engine does: the reader has then read to the end of the
// stream, and closing leaves none of the peer's frames unread. Closing a
// socket with frames of the peer unread resets the connection: over TCP
// the peer's kernel drops what it had not delivered yet, and on a unix
// socket the peer reads the reset (ECONNRESET) before the Bye queued for
// it.
func (c *Chan) awaitHangUp() {
	t := time.NewTimer(closeLinger)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	}
}

// sayBye sends m, and waits 200 ms at most for the send, then, once it
// is sent, runs then (linger, awaitHangUp): a peer that does not read
// cannot hold Close or Evict long. sent closes once the send has ended
// (the channel's failure, which closes the connection, ends it).
func (c *Chan) sayBye(m *wire.Bye, then func()) (sent <-chan struct{}) {
	done := make(chan struct{})
	var err error
	go func() { err = c.c.Send(m); close(done) }()
	select {
	case <-done:
		if err == nil {
			then()
		}
	case <-time.After(200 * time.Millisecond):
	}
	return done
}

// closeLinger bounds how long Close waits for the peer to acknowledge
// what was sent (see Close).
const closeLinger = 500 * time.Millisecond

// linger waits while the transport reports bytes the peer has not
// acknowledged, until closeLinger has passed or the channel has failed
// (the peer went: nothing more will be acknowledged). The reader keeps
// reading meanwhile, so the peer is not held up by a full window of ours.
// On a transport that says so (a unix socket: ipc.Conn.AwaitsHangUp,
// whose wrappers forward it) it waits for the peer to hang up
// (awaitHangUp).
func (c *Chan) linger() {
	if h, ok := c.c.Transport().(interface{ AwaitsHangUp() bool }); ok && h.AwaitsHangUp() {
		c.awaitHangUp()
		return
	}
	u, ok := c.c.Transport().(interface{ Unacked() (int, bool) })
	if !ok {
		return
	}
	deadline := time.Now().Add(closeLinger)
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		if n, ok := u.Unacked(); !ok || n == 0 || time.Now().After(deadline) {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-c.done:
			t.Stop()
			return
		case <-t.C:
		}
	}
}
