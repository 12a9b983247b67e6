package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEndpointSource: an accepted endpoint's Source is where its peer
// connects from as the socket says (a TCP peer's IP address, a unix
// socket peer's pid), whatever the peer calls itself; a dialed one has
// none.
func TestEndpointSource(t *testing.T) {
	for _, tc := range []struct {
		network, addr, want string
	}{
		{"tcp", "127.0.0.1:0", "127.0.0.1"},
		{"unix", "", fmt.Sprintf("pid %d", os.Getpid())},
	} {
		t.Run(tc.network, func(t *testing.T) {
			owner := newEngine(t, Config{Devices: DevicesNone})
			user := newEngine(t, Config{Devices: DevicesNone})
			addr := tc.addr
			if tc.network == "unix" {
				addr = filepath.Join(t.TempDir(), "e.sock")
			}
			l, err := owner.Listen(tc.network, addr)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ep, err := user.Dial(ctx, tc.network, l.Addr())
			require.NoError(t, err)
			defer ep.Close()
			in, err := l.Accept(ctx)
			require.NoError(t, err)
			defer in.Close()
			require.Equal(t, tc.want, in.Source())
			require.Empty(t, ep.Source(), "a dialed endpoint")
		})
	}
}
