package bench

import (
	"bufio"
	"encoding/json"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	ops := make(chan string, 16)
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		sc, err := ln.Accept()
		if err != nil {
			return
		}
		defer func() { _ = sc.Close() }()
		r := bufio.NewReader(sc)
		for i := 0; i < 16; i++ { // reads every request, answers none
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var m ctlMsg
			if json.Unmarshal(line, &m) != nil {
				return
			}
			ops <- m.Op
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	p := &Peer{Addr: "tcp:" + ln.Addr().String(), ctl: newCtlConn(conn, "test server")}
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
