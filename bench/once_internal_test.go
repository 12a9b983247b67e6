package bench

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestServerOnceWaitsForAClient: gxfer perf -server -once exits after one
// client, and a connection that never became one (a port probe that
// connects and closes, garbage, a hello of another control version) is
// not that client: the server still serves the next one, then exits
// cleanly. Before the fix the first connection counted: a probe such as
// `nc -z` ended a -once server ("disconnected without saying bye", exit 1)
// and the real client found nobody listening.
func TestServerOnceWaitsForAClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		send string // "" : connect and close
	}{
		{"connect and close", ""},
		{"garbage", "\x16\x03\x01 not json\n"},
		{"another control version", fmt.Sprintf(`{"op":"hello","version":%d,"pid":1}`+"\n", ctlVersion+1)},
		{"request before hello", `{"op":"alloc","mem":"host","size":64}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvEng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
			require.NoError(t, err)
			defer srvEng.Close()
			srv, err := Listen(srvEng, ServerConfig{TCP: "127.0.0.1:0", Once: true})
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- srv.Serve(context.Background()) }()
			addr := strings.TrimPrefix(srv.Addr(), "tcp:")

			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			if tc.send != "" {
				require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
				_, err = c.Write([]byte(tc.send))
				require.NoError(t, err)
				// The server answers (a refusal) or closes: either way the
				// session is over once the read returns.
				_, _ = c.Read(make([]byte, 4096))
			}
			require.NoError(t, c.Close())

			eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
			require.NoError(t, err)
			defer eng.Close()
			var p *Peer
			require.Eventually(t, func() bool { // the probe's session ends first
				p, err = DialPeerTCP(context.Background(), eng, addr)
				return err == nil
			}, 10*time.Second, 20*time.Millisecond, "the -once server did not serve the client after the probe")
			require.NoError(t, p.Close())
			require.NoError(t, <-done, "a client that says bye ends a -once server cleanly")
		})
	}
}
