package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClusterSecretIsCopied: the engine keeps its own copy of
// Config.ClusterSecret. It kept the caller's slice, so a caller that
// cleared its copy of the secret once New returned (usual hygiene for
// key material) left the engine authenticating with all-zero bytes:
// HMAC pads keys with zeros, so a dialer with 16 zero bytes as its
// secret got in.
func TestClusterSecretIsCopied(t *testing.T) {
	ctx := context.Background()
	secret := []byte("the cluster's shared secret, 32B")
	owner := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP, ClusterSecret: secret})
	clear(secret)
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	for _, tc := range []struct {
		name   string
		secret []byte
		err    error
	}{
		{"zero key", make([]byte, 16), ErrUnauthenticated},
		{"the secret", []byte("the cluster's shared secret, 32B"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 1, ClusterSecret: tc.secret})
			ep, err := peer.Dial(ctx, "tcp", l.Addr())
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.NoError(t, ep.Close())
		})
	}
}
