package bench

import (
	"fmt"
	"net"

	"github.com/gxfer/gxfer/internal/handshake"
)

// A connection that has not said hello holds a goroutine and an fd for
// the hello wait (helloTimeout) at most; these bound how many of them a
// server holds, so that a peer opening connections in a loop and saying
// nothing cannot hold thousands.
const (
	// maxPending bounds the connections without hello in all.
	maxPending = 64
	// maxPendingPerSource bounds those of one source (pendingSource).
	maxPendingPerSource = 8
)

// pendingSource is the source a connection without hello counts against,
// as the engine's listener counts handshakes (handshake.PeerSource): a
// TCP peer's IP address (an IPv6 one's /64), a unix peer's pid.
func pendingSource(c net.Conn, pid int) string {
	if _, ok := c.(*net.UnixConn); ok {
		return handshake.PeerSource("", uint32(pid))
	}
	return handshake.PeerSource(c.RemoteAddr().String(), 0)
}

// admitPending records sess (from source) as waiting for its hello
// (under s.mu). To make room it closes one waiting already: the source's
// oldest when the source has maxPendingPerSource; else, at maxPending,
// the oldest of the source holding the most. A source flooding the
// server closes its own connections, and a client from another source
// that says hello at once is served. It returns a line for the log when
// one was closed (for the 1st, 2nd, 4th, ...: no line per connection of a
// flood), to be logged once s.mu is released.
func (s *Server) admitPending(sess *session, source string) (note string) {
	s.accepted++
	sess.source, sess.seq = source, s.accepted
	by := map[string]int{}
	for p := range s.pending {
		by[p.source]++
	}
	var victim *session
	switch {
	case by[source] >= maxPendingPerSource:
		for p := range s.pending {
			if p.source == source && (victim == nil || p.seq < victim.seq) {
				victim = p
			}
		}
	case len(s.pending) >= maxPending:
		for p := range s.pending {
			if victim == nil || by[p.source] > by[victim.source] ||
				by[p.source] == by[victim.source] && p.seq < victim.seq {
				victim = p
			}
		}
	}
	if victim != nil {
		delete(s.pending, victim)
		victim.evicted = true
		_ = victim.c.Close() // its recv ends (an abort's deadline could be reset by it)
		s.evictions++
		if s.evictions&(s.evictions-1) == 0 {
			note = fmt.Sprintf("# closed %s: no hello yet, and %d connection(s) without hello from %s (at most %d from one source, %d in all); %d closed so far",
				victim.who, by[victim.source], victim.source, maxPendingPerSource, maxPending, s.evictions)
		}
	}
	s.pending[sess] = struct{}{}
	return note
}
