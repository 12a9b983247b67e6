package bench

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPeerCloseEndsKeepalivePing: a Close while the keepalive's ping waits
// for a server that no longer answers returns at once. Before the fix the
// ping ran with context.Background(), so Close waited for it up to
// helloTimeout (10 s).
func TestPeerCloseEndsKeepalivePing(t *testing.T) {
	ops := make(chan string, 16)
	addr, srvDone := ctlServer(t, 16, func(_ net.Conn, line []byte) bool { // reads every request, answers none
		op, ok := ctlOp(line)
		if ok {
			ops <- op
		}
		return ok
	})
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	p := &Peer{Addr: "tcp:" + addr, ctl: newCtlConn(conn, "test server")}
	p.keepalive(40 * time.Millisecond) // last is 0: the first tick pings
	select {
	case op := <-ops:
		require.Equal(t, opPing, op)
	case <-time.After(30 * time.Second): // bounds a broken test only
		_ = p.Close()
		require.FailNow(t, "no keepalive ping")
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case <-closed:
	case <-time.After(8 * time.Second): // helloTimeout is 10 s
		<-closed
		require.FailNow(t, "Close waited for the unanswered keepalive ping")
	}
	<-srvDone
}
