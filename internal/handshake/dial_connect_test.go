package handshake

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// unansweredTCP is a loopback address whose connects get no answer: a
// listening socket of backlog 0 (made with raw syscalls: net.Listen
// takes somaxconn) whose accept queue holds one connection nobody
// accepts, so that the kernel drops every further SYN (tcp_conn_request:
// sk_acceptq_is_full) and a connect waits for its SYN retries.
func unansweredTCP(t *testing.T) string {
	// With tcp_abort_on_overflow set, a full accept queue answers with a
	// reset instead: no connect hangs on this host.
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_abort_on_overflow"); err == nil && strings.TrimSpace(string(b)) != "0" {
		t.Skip("net.ipv4.tcp_abort_on_overflow is set: a full accept queue resets connects instead of dropping their SYNs")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(fd) })
	require.NoError(t, unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, unix.Listen(fd, 0))
	sa, err := unix.Getsockname(fd)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	// On a listening socket tcpi_unacked is the accept queue's length.
	require.Eventually(t, func() bool {
		ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		return err == nil && ti.Unacked >= 1
	}, 5*time.Second, time.Millisecond, "the accept queue never filled")
	return addr
}

// TestDialConnectBounded: a Dial to a TCP address that never answers the
// SYN ends by its own bound (DialConfig.Timeout, else 5 s), as its
// handshake does, with an error of kind Timeout (and Peer, still
// wrapping the cause). Its connect was bounded by the caller's ctx only:
// with context.Background() it waited for the kernel's SYN retries
// (about 2 minutes) and then failed with Peer alone.
func TestDialConnectBounded(t *testing.T) {
	addr := unansweredTCP(t)
	ds := newSide(t, nil, false)
	// The caller's ctx only stops the test, far beyond the Dial's bound,
	// if the connect is not bounded.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Dial(ctx, DialConfig{Local: ds.local, Network: "tcp", Addr: addr, Want: datapath.KindTCP, Timeout: 200 * time.Millisecond}, ds.connect)
	require.Error(t, err)
	end, _ := ctx.Deadline()
	require.True(t, time.Now().Before(end), "the Dial ended only at the caller's deadline: %v", err)
	require.ErrorIs(t, err, gxerr.Timeout)
	require.ErrorIs(t, err, gxerr.Peer)
	require.Equal(t, "timeout", gxerr.KindName(gxerr.KindOf(err)))
	require.Empty(t, ds.all(), "the dialer made no endpoint")
}
