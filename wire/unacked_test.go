package wire

import (
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUnacked: a TCP stream reports what its peer has not acknowledged
// (zero once the peer's kernel has everything), other streams report
// that they cannot say.
func TestUnacked(t *testing.T) {
	for _, tc := range []struct {
		network string
		tcp     bool
	}{{"tcp", true}, {"unix", false}} {
		t.Run(tc.network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if tc.network == "unix" {
				addr = filepath.Join(t.TempDir(), "s")
			}
			ln, err := net.Listen(tc.network, addr)
			require.NoError(t, err)
			defer ln.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				c, _ := ln.Accept()
				accepted <- c
			}()
			c, err := net.Dial(tc.network, ln.Addr().String())
			require.NoError(t, err)
			peer := <-accepted
			require.NotNil(t, peer)
			defer peer.Close()
			s := NewStreamTransport(c)
			defer s.Close()
			require.NoError(t, s.Send(make([]byte, 1000), nil))
			// The peer reads the frame: its kernel acknowledged it.
			got := make([]byte, 1004)
			_, err = io.ReadFull(peer, got)
			require.NoError(t, err)
			n, ok := s.Unacked()
			require.Equal(t, tc.tcp, ok)
			if !ok {
				return
			}
			// The acknowledgement may trail the bytes.
			for deadline := time.Now().Add(10 * time.Second); n != 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
				n, ok = s.Unacked()
				require.True(t, ok)
			}
			require.Zero(t, n)
		})
	}
}
