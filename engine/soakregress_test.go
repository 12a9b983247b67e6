package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/ipc"
)

// Soak 20261124 (put/unix/gaudi->host): an import whose reply arrived
// while the endpoint was failing came back from the handle cache as
// "ipc: stale handle: peer N purged" (the endpoint's teardown purged the
// loading entry), and importErr reported it as ErrInvalid "stale key":
// the key was valid, the peer had gone. It must be the endpoint's error.
func TestRegressImportPurgedByEndpointFailureIsPeerError(t *testing.T) {
	for _, tc := range []struct {
		name string
		why  error
		kind error
	}{
		{"peer lost", newErr(ErrPeer, "test: connection lost", nil), ErrPeer},
		{"closed", newErr(ErrClosed, "endpoint closed", nil), ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, peer, _, ep, _ := unixPair(t, Config{Devices: DevicesNone})
			b, err := peer.Alloc(4096, Host)
			require.NoError(t, err)
			key := ipc.Key{Peer: ep.pid, AllocID: 1, Generation: 1}
			// The import succeeds, but the endpoint fails (and purges its
			// imports) before the importer returns: the exact interleaving.
			_, err = peer.imports.Get(key, func(ipc.Key) (*imported, uint64, error) {
				ep.fail(tc.why)
				return &imported{buf: b}, 4096, nil
			})
			require.ErrorIs(t, err, ipc.ErrStale)
			err = ep.importErr(err)
			require.ErrorIs(t, err, tc.kind)
			require.NotErrorIs(t, err, ErrInvalid)
		})
	}
}
