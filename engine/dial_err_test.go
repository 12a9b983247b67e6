package engine

import (
	"context"
	"net"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDialFailureIsTyped: a Dial that cannot reach its peer fails with an
// error matching ErrPeer (and still the cause), on both networks.
func TestDialFailureIsTyped(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	// A TCP port nobody listens on: bind one, note it, close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadTCP := l.Addr().String()
	require.NoError(t, l.Close())
	for _, tc := range []struct {
		network, addr string
		cause         error
	}{
		{"tcp", deadTCP, syscall.ECONNREFUSED},
		{"unix", filepath.Join(t.TempDir(), "nobody.sock"), nil},
	} {
		t.Run(tc.network, func(t *testing.T) {
			_, err := e.Dial(context.Background(), tc.network, tc.addr)
			require.ErrorIs(t, err, ErrPeer)
			if tc.cause != nil {
				require.ErrorIs(t, err, tc.cause)
			}
		})
	}
}
