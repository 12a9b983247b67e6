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
// connection was lost. It waits for the Bye as Close does, not for the
// reader, the writer nor the requests being served. A channel that
// failed already is left as it is.
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
	sent := c.sayBye(bye)
	c.Fail(err)
	<-sent
}

// sayBye sends m, and waits 200 ms at most for the send, then (TCP) for
// the peer's host to acknowledge it (see linger): a peer that does not
// read cannot hold Close or Evict. sent closes once the send has ended
// (the channel's failure, which closes the connection, ends it).
func (c *Chan) sayBye(m *wire.Bye) (sent <-chan struct{}) {
	done := make(chan struct{})
	var err error
	go func() { err = c.c.Send(m); close(done) }()
	select {
	case <-done:
		if err == nil {
			c.linger()
		}
	case <-time.After(200 * time.Millisecond):
	}
	return done
}
