package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// The target's answers to hellos (perf_kv.go, kvTarget.run): on
// goroutines of their own, since reaching an initiator may take a dial's
// timeout.

// maxHellos bounds the hellos a target answers at once.
const maxHellos = 64

// maxAcksQueued bounds the acknowledgements waiting to go to an
// initiator: at most -O (at most 1024) for one that takes them.
const maxAcksQueued = 1024

// helloResult is how the welcome of an initiator went.
type helloResult struct {
	from   string
	inc    uint64 // its incarnation
	source string // where its hello came from (agent.Notification.Source)
	// reached: the agent Connect reached at the hello's address (no
	// store), if not from: the loop forgets it (peerForgets.strayed).
	reached string
	base    uint64
	err     error
}

// regionReq asks the target's loop for the region of initiator from;
// the loop answers on reply (buffered), errNoRegion if every region is in
// use.
type regionReq struct {
	from  string
	inc   uint64 // its incarnation
	reply chan regionReply
}

type regionReply struct {
	base uint64
	err  error
}

var errNoRegion = errors.New("hello: every region of the section is in use")

// errIdled: the initiator (this incarnation of it) was ended for sending
// no request within the target's -wait.
var errIdled = errors.New("hello: it was idle")

// welcome answers the hello h.from sent (m), which came from h.source
// (agent.Notification.Source): it reaches it (at the hello's address when
// there is no store: dialBack; an address that serves another agent is
// refused, that agent noted in h.reached), takes a region of the section
// for it (only then: a hello that cannot be answered holds none), and
// sends its welcome.
func (t *kvTarget) welcome(ctx context.Context, h *helloResult, m kvMsg, regions chan<- regionReq) (uint64, error) {
	from, inc := h.from, h.inc
	if t.connect {
		addr, err := dialBack(m, h.source)
		if err != nil {
			return 0, err
		}
		name, err := t.a.Connect(ctx, addr)
		if err != nil {
			return 0, fmt.Errorf("cannot reach it at %s: %w", addr, err)
		}
		if name != from {
			h.reached = name
			return 0, fmt.Errorf("the address its hello names, %s, serves agent %q: not answered", addr, name)
		}
	}
	q := regionReq{from: from, inc: inc, reply: make(chan regionReply, 1)}
	select {
	case regions <- q:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	r := <-q.reply
	if r.err != nil {
		return 0, r.err
	}
	if err := t.a.Notify(ctx, from, kvMsg{kind: kvWelcome, p: m.p, base: r.base}.encode()); err != nil {
		return r.base, fmt.Errorf("gone before its welcome: %w", err)
	}
	return r.base, nil
}

// dialBack is the address a target reaches the sender of hello m at,
// given the hello's source (agent.Notification.Source: where its
// connection comes from, as the socket says, not the peer). A hello over
// a unix socket comes from a process of this node and of the target's
// uid (the engine checks it): the address it names, its socket first, is
// one it could reach itself. A hello over TCP is answered only at a TCP
// address of its own source (its IP address; an IPv6 /64), by IP: else a
// peer could make the target dial any host and port, or, naming a unix
// socket, any socket of this node the target's uid may open (a TCP peer,
// even one on this node, may be of any uid); nor, reached there, at the
// unix socket its record names (the target's agent sets
// Config.NoUnixFromTCP). An initiator reached through
// NAT, or whose connections leave from another address than the one it
// listens at, is then not answered: run it with -etcd, or over unix.
func dialBack(m kvMsg, source string) (string, error) {
	if strings.HasPrefix(source, "pid ") {
		if m.unix != "" {
			return m.unix, nil
		}
		return m.tcp, nil
	}
	host, _, err := net.SplitHostPort(m.tcp)
	if err != nil {
		return "", fmt.Errorf("hello over TCP from %s without a TCP address (%q): not answered", source, m.tcp)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", fmt.Errorf("its TCP address %s is no IP address: not on its source %s, not dialed", m.tcp, source)
	}
	// IP:port, the port a number: SplitHostPort takes any port, and
	// Connect dials an address with a "/" ("127.0.0.1:/x.sock") as a
	// unix socket path.
	if _, err := netip.ParseAddrPort(m.tcp); err != nil {
		return "", fmt.Errorf("its TCP address %s is no IP:port (%v): not dialed", m.tcp, err)
	}
	ip = ip.WithZone("").Unmap()
	src, err := netip.ParseAddr(source)
	if err != nil { // an IPv6 /64
		pfx, perr := netip.ParsePrefix(source)
		if perr != nil || !pfx.Contains(ip) {
			return "", fmt.Errorf("its TCP address %s is not on its source %s: not dialed", m.tcp, source)
		}
		return m.tcp, nil
	}
	if src.Unmap() != ip {
		return "", fmt.Errorf("its TCP address %s is not on its source %s: not dialed", m.tcp, source)
	}
	return m.tcp, nil
}
