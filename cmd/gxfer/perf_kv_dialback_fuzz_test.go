package main

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzDialBack: the addresses of a hello are the peer's (any bytes), its
// source is what the target's socket says (handshake.PeerSource: "pid N",
// an IPv4 address, an IPv6 /64). Over unix, dialBack answers at what the
// hello names. Over TCP it answers only at the hello's TCP address, and
// only if that is IP:port (agent.Connect dials it over TCP: no "/") with
// its IP the source's (in the source's /64).
func FuzzDialBack(f *testing.F) {
	for _, s := range [][3]string{
		{"", "127.0.0.1:4000", "127.0.0.1"},
		{"/tmp/a.sock", "127.0.0.1:4000", "pid 12"},
		{"", "[2001:db8::7]:4000", "2001:db8::/64"},
		{"", "[::ffff:10.0.0.1]:1", "10.0.0.1"},
		{"", "127.0.0.2:4000", "127.0.0.1"},
		{"", "localhost:4000", "127.0.0.1"},
		{"/tmp/a.sock", "", "127.0.0.1"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, unix, tcp, source string) {
		addr, err := dialBack(kvMsg{kind: kvHello, unix: unix, tcp: tcp}, source)
		if err != nil {
			if addr != "" {
				t.Fatalf("refused with an address %q: %v", addr, err)
			}
			return
		}
		if strings.HasPrefix(source, "pid ") {
			if want := map[bool]string{true: unix, false: tcp}[unix != ""]; addr != want {
				t.Fatalf("unix source: answered at %q, want %q", addr, want)
			}
			return
		}
		if addr != tcp {
			t.Fatalf("TCP source %q: answered at %q, not the hello's TCP address %q", source, addr, tcp)
		}
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || strings.Contains(addr, "/") {
			t.Fatalf("TCP source %q: answered at %q, not an IP:port the agent dials over TCP (%v)", source, addr, err)
		}
		ip := ap.Addr().WithZone("").Unmap()
		if src, err := netip.ParseAddr(source); err == nil {
			if src.Unmap() != ip {
				t.Fatalf("TCP source %q: answered at %q, another host", source, addr)
			}
		} else if pfx, err := netip.ParsePrefix(source); err != nil || !pfx.Contains(ip) {
			t.Fatalf("TCP source %q: answered at %q, outside it (%v)", source, addr, err)
		}
	})
}
