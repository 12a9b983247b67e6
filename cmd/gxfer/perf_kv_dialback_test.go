package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
)

// countingListener accepts connections on network, address (closing
// them at once) and counts them; closed at the test's end.
func countingListener(t *testing.T, network, address string) (net.Listener, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen(network, address)
	require.NoError(t, err)
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
	return l, &n
}

// TestPerfAgentTargetDialsBackOnlyHelloSource: without a store, a target
// reaches an initiator at the address its hello names. Before the fix it
// dialed whatever that was: a peer could make it connect to any host and
// port (here 127.0.0.2, another host as far as the source goes), or, over
// TCP, to any unix socket of the target's node. A hello over TCP is now
// answered only at a TCP address of its own source (the IP address its
// connection comes from); a peer that names one is welcomed.
func TestPerfAgentTargetDialsBackOnlyHelloSource(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tout, terr, taddr := tcpTarget(t, ctx)

	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	ol, otherHost := countingListener(t, "tcp", "127.0.0.2:0")
	ul, unixSock := countingListener(t, "unix", filepath.Join(dir, "other.sock"))
	tests := []struct {
		name, peer string
		unix, tcp  string        // what the hello names ("self": the peer's own TCP address)
		refused    string        // the target's output on the hello ("": welcomed)
		notDialed  *atomic.Int64 // accepts that must not happen
	}{
		{"another host", "far", "", ol.Addr().String(), "not on its source 127.0.0.1: not dialed", otherHost},
		{"a unix socket of the target's node", "sock", ul.Addr().String(), "", "without a TCP address", unixSock},
		{"a unix socket and its own address", "both", ul.Addr().String(), "self", "", unixSock},
		{"its own address", "self", "", "self", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, peer := kvPeer(t, ctx, agent.Config{Name: tt.peer, TCP: "127.0.0.1:0"}, taddr, "target", terr)
			tcp := tt.tcp
			if tcp == "self" {
				tcp = a.Metadata().TCP
			}
			require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: p, unix: tt.unix, tcp: tcp}.encode()))
			re := regexp.MustCompile(`# initiator ` + tt.peer + `: .*`)
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
				if tt.notDialed != nil {
					require.Zero(t, tt.notDialed.Load(), "the target dialed an address a hello over TCP named:\n%s", tout.String())
				}
				if re.MatchString(tout.String()) {
					break
				}
				require.True(t, time.Now().Before(deadline), "the hello was not answered: %s", tout.String())
			}
			if tt.refused != "" {
				require.Contains(t, re.FindString(tout.String()), tt.refused)
			} else {
				rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
				defer rcancel()
				n, err := a.Recv(rctx)
				require.NoError(t, err, tout.String())
				m, err := decodeKVMsg(n.Msg)
				require.NoError(t, err)
				require.Equal(t, uint8(kvWelcome), m.kind)
			}
			if tt.notDialed != nil {
				require.Zero(t, tt.notDialed.Load())
			}
		})
	}
}

// TestPerfAgentTargetDialBack: the address a target reaches a hello's sender at, by the
// hello's source: over unix, what it names (its socket first); over TCP,
// only its TCP address, and only on its source (an IPv4 address, an IPv6
// /64; by IP, not by name).
func TestPerfAgentTargetDialBack(t *testing.T) {
	tests := []struct {
		name, source, unix, tcp string
		want                    string // "": refused
	}{
		{"unix: its socket", "pid 42", "/run/i.sock", "10.0.0.3:7000", "/run/i.sock"},
		{"unix: no socket, its TCP address", "pid 42", "", "10.9.9.9:7000", "10.9.9.9:7000"},
		{"tcp: its address", "10.0.0.3", "/run/i.sock", "10.0.0.3:7000", "10.0.0.3:7000"},
		{"tcp: another host", "10.0.0.3", "", "10.0.0.4:7000", ""},
		{"tcp: a unix socket only", "10.0.0.3", "/run/i.sock", "", ""},
		{"tcp: a host name", "127.0.0.1", "", "localhost:7000", ""},
		{"tcp: IPv4-mapped IPv6", "10.0.0.3", "", "[::ffff:10.0.0.3]:7000", "[::ffff:10.0.0.3]:7000"},
		{"tcp: IPv6 in its /64", "2001:db8:1:2::/64", "", "[2001:db8:1:2::99]:7000", "[2001:db8:1:2::99]:7000"},
		{"tcp: IPv6 beyond its /64", "2001:db8:1:2::/64", "", "[2001:db8:1:3::1]:7000", ""},
		{"tcp: link-local with a zone", "fe80::/64", "", "[fe80::1%eth0]:7000", "[fe80::1%eth0]:7000"},
		{"no source", "", "/run/i.sock", "10.0.0.3:7000", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := dialBack(kvMsg{kind: kvHello, unix: tt.unix, tcp: tt.tcp}, tt.source)
			if tt.want == "" {
				require.Error(t, err, "dialed %q", got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestPerfAgentTargetDialsNoUnixOfTCPRecord: a hello over TCP is answered
// only at the sender's TCP address, never at a unix path (dialBack); but
// Connect at that address fetched the sender's record, and when it named
// a socket of this node, dialed it: a TCP peer (of any uid) still made
// the target connect to any unix socket of its node, here a listener
// that took the path the peer's record names. The target now keeps a
// peer whose record came over TCP at TCP (agent.Config.NoUnixFromTCP).
func TestPerfAgentTargetDialsNoUnixOfTCPRecord(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tout, terr, taddr := tcpTarget(t, ctx)

	sock := filepath.Join(dir, "rec.sock")
	a, peer := kvPeer(t, ctx, agent.Config{Name: "rec", Unix: sock, TCP: "127.0.0.1:0"}, taddr, "target", terr)
	require.Equal(t, sock, a.Metadata().Unix)
	// The path the record names is another listener's now.
	require.NoError(t, os.Remove(sock))
	_, dialed := countingListener(t, "unixpacket", sock)

	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: p, tcp: a.Metadata().TCP}.encode()))
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	n, err := a.Recv(rctx)
	require.NoError(t, err, tout.String())
	m, err := decodeKVMsg(n.Msg)
	require.NoError(t, err)
	require.Equal(t, uint8(kvWelcome), m.kind)
	require.Zero(t, dialed.Load(), "the target dialed the unix socket a record fetched over TCP named:\n%s", tout.String())
}

// tcpTarget starts a target (serveTarget) listening on loopback TCP and
// returns its outputs and its TCP address, once it printed it.
func tcpTarget(t *testing.T, ctx context.Context) (tout, terr *syncBuffer, taddr string) {
	t.Helper()
	tout, terr = serveTarget(t, ctx, "-tcp", "127.0.0.1:0")
	taddr = waitOutput(t, tout, regexp.MustCompile(`# target t incarnation \S+ \| unix \S+ tcp (\S+) `), "the target did not start")[1]
	return tout, terr, taddr
}
