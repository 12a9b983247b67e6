package bench

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestServerCloseDuringRequest: Close ends the session in progress even
// when it comes while the server handles a request (here an attach whose
// engine endpoint never comes: the server waits in accept), not only
// while it waits for the next one. Before the fix the session's next
// read set a new deadline over Close's, so the session went on: the
// server answered, waited for the client's next request for its idle
// wait (10 minutes here) and Serve did not return; a client that kept
// sending requests kept it serving after Close.
func TestServerCloseDuringRequest(t *testing.T) {
	srvEng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer func() { require.NoError(t, srvEng.Close()) }()
	srv, err := Listen(srvEng, ServerConfig{TCP: "127.0.0.1:0"})
	require.NoError(t, err)
	srv.idleWait = 10 * time.Minute
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()

	c := dialRaw(t, srv)
	require.Empty(t, c.call(t, rawHello).Error)
	_, err = c.c.Write([]byte(`{"op":"attach"}` + "\n"))
	require.NoError(t, err)
	// The server reads the attach and waits for the endpoint (up to
	// attachTimeout, 10 s); Close comes meanwhile (if it came before the
	// read, the test passes whatever the fix).
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, srv.Close())

	// The deadline only bounds the test: the server closes the
	// connection (its answer to the attach may come first).
	require.NoError(t, c.c.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = io.ReadAll(c.r)
	require.NoError(t, err, "the session goes on after Close")
	require.NoError(t, <-done)
}
