package testutil

import (
	"net"
	"testing"
)

// SilentListener listens on network ("tcp" or "unixpacket") at addr
// (loopback or a socket path), accepts every connection and never
// answers nor reads: a peer that takes the connect and leaves the
// handshake unanswered. It returns the address bound; the listener and
// the connections it holds close at the test's cleanup.
func SilentListener(t testing.TB, network, addr string) string {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("silent listener on %s %s: %v", network, addr, err)
	}
	conns := make(chan net.Conn, 4)
	go func() {
		defer close(conns)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- c // held open, never answered
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		for c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}
