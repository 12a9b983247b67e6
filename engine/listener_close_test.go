package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestListenerCloseLeavesEndpointsOpen: Listener.Close stops accepting;
// the endpoints it already serves stay open, whether Accept took them or
// not (an owner that serves its exports without calling Accept may close
// its listener to turn new peers away and keep serving the ones it has).
// New dialers are refused.
func TestListenerCloseLeavesEndpointsOpen(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			owner := newEngine(t, Config{Devices: DevicesNone})
			user := newEngine(t, Config{Devices: DevicesNone})
			l := listenLocal(t, owner, network)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang guard only
			defer cancel()
			buf, err := owner.Alloc(64, Host)
			require.NoError(t, err)
			key, err := buf.Export()
			require.NoError(t, err)
			src, err := user.Alloc(64, Host)
			require.NoError(t, err)
			fill(src.Bytes(), 3)

			accepted, err := user.Dial(ctx, network, l.Addr())
			require.NoError(t, err)
			_, err = l.Accept(ctx)
			require.NoError(t, err)
			unaccepted, err := user.Dial(ctx, network, l.Addr())
			require.NoError(t, err)
			require.NoError(t, l.Close())

			for name, ep := range map[string]*Endpoint{"accepted": accepted, "not accepted": unaccepted} {
				require.NoError(t, ep.PutSync(ctx, src.All(), key), "%s endpoint after the listener's Close", name)
			}
			require.Equal(t, src.Bytes(), buf.Bytes())
			_, err = user.Dial(ctx, network, l.Addr())
			require.Error(t, err, "a Dial after the listener's Close")
		})
	}
}
