package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServerHelloAfterBye: a client that comes as the previous one leaves
// (it said bye and has its reply, the server still freeing its session)
// is served, not refused as busy: the next command of a script. Only a
// client arriving while another is being served is refused.
func TestServerHelloAfterBye(t *testing.T) {
	srv, _ := startRawServer(t, func(s *Server) {
		s.cleanupHook = func() { time.Sleep(300 * time.Millisecond) } // a slow cleanup
	})
	first := dialRaw(t, srv)
	r := first.call(t, rawHello)
	require.NotNil(t, r)
	require.Empty(t, r.Error)

	busy := dialRaw(t, srv)
	r = busy.call(t, rawHello)
	require.NotNil(t, r)
	require.Contains(t, r.Error, "busy with client pid", "a client arriving during a session is refused")

	r = first.call(t, `{"op":"bye"}`)
	require.NotNil(t, r)
	require.Empty(t, r.Error)
	require.NoError(t, first.c.Close())

	next := dialRaw(t, srv)
	r = next.call(t, rawHello)
	require.NotNil(t, r)
	require.Empty(t, r.Error, "the client after a bye waits for the session's cleanup")
	r = next.call(t, `{"op":"bye"}`)
	require.NotNil(t, r)
	require.Empty(t, r.Error)
}
