package metrics

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestServerClosesIdleConnections: a client that scrapes once and keeps
// its connection open without another request does not hold it (and a
// goroutine and a descriptor of the server) forever.
func TestServerClosesIdleConnections(t *testing.T) {
	wait := 5 * time.Second
	s, err := serve("127.0.0.1:0", prometheus.NewRegistry(), 200*time.Millisecond)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	c, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	// Idle now: the server must close the connection.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
	_, err = br.ReadByte()
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the idle connection is still open after %v", wait)
	require.ErrorIs(t, err, io.EOF, "closed by the server")
}
