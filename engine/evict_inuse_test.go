package engine

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMaxPeersSparesEndpointInLocalUse: an accepted endpoint the
// listener's own application uses (Puts into the peer's memory, messages
// to the peer, a binding's Puts), its peer only answering, is busy: at
// MaxPeers a newcomer is refused with ErrTooManyPeers and the endpoint
// stays up. Before, only the peer's requests made an endpoint busy: it
// counted as one whose peer never made a request and was closed first,
// between two of the application's operations (its next one failed with
// ErrPeer), so any dialer could push out the endpoints a server was
// pushing data through.
func TestMaxPeersSparesEndpointInLocalUse(t *testing.T) {
	tests := []struct {
		name string
		use  func(t *testing.T, ep *Endpoint, src *Buffer, k RemoteKey)
	}{
		{"put", func(t *testing.T, ep *Endpoint, src *Buffer, k RemoteKey) {
			for range 2 { // the second maps nothing: no frame at all
				require.NoError(t, ep.PutSync(context.Background(), src.All(), k))
			}
		}},
		{"message", func(t *testing.T, ep *Endpoint, _ *Buffer, _ RemoteKey) {
			require.NoError(t, ep.Send(context.Background(), []byte("news")))
		}},
		{"binding", func(t *testing.T, ep *Endpoint, src *Buffer, k RemoteKey) {
			b, err := ep.Bind(context.Background(), src.All(), k)
			require.NoError(t, err)
			require.NoError(t, b.Put())
			h, err := b.Hold()
			require.NoError(t, err)
			require.NoError(t, h.Put())
			h.Release()
			require.NoError(t, b.Close())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := Config{Devices: DevicesNone, MaxPeers: 1}
			owner, peer, other := newEngine(t, cfg), newEngine(t, cfg), newEngine(t, cfg)
			l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
			require.NoError(t, err)
			defer l.Close()
			dst, err := peer.Alloc(4096, Host)
			require.NoError(t, err)
			k, err := dst.Export()
			require.NoError(t, err)
			src, err := owner.Alloc(4096, Host)
			require.NoError(t, err)
			dialed, err := peer.Dial(ctx, "unix", l.Addr())
			require.NoError(t, err)
			defer dialed.Close()
			ep, err := l.Accept(ctx)
			require.NoError(t, err)
			tt.use(t, ep, src, k)

			_, err = other.Dial(ctx, "unix", l.Addr())
			require.ErrorIs(t, err, ErrTooManyPeers)
			require.NoError(t, ep.Err())
			require.NoError(t, ep.PutSync(ctx, src.All(), k))
		})
	}
}
