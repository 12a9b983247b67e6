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

// Soak 20261124 (unresolved TCP futures): the endpoint failed while its
// reader was reading a Get's Data frame (the link went down, the read
// hit PeerTimeout). The failure answered the pending reply, which took
// the inbound out of ep.inbound and canceled it, but it could not finish
// while routed; the reader's abortRouting then cleared routing without
// finishing it, and cancelInbound no longer saw it: the Get's landing
// part never completed and its future never resolved.
func TestRegressInboundCanceledWhileRoutedFinishesOnAbort(t *testing.T) {
	peer := newEngine(t, Config{Devices: DevicesNone})
	ep := &Endpoint{e: peer} // only its reader's routing state is used
	dst, err := peer.Alloc(4096, Host)
	require.NoError(t, err)
	done := make(chan error, 1)
	in := &inbound{id: 1, dst: dst.Slice(0, 4096), n: 4096, onDone: func(err error) { done <- err }}
	in.mu.Lock()
	in.routing = true // the reader is in the middle of its Data frame
	in.got = 1024
	in.mu.Unlock()
	ep.cur = routed{in: in, off: 1024, n: 1024}
	why := newErr(ErrPeer, "test: connection lost", nil)
	in.cancel(why) // the failure's reply (onReply) or the op's timeout
	select {
	case <-done:
		t.Fatal("finished while still routed")
	default:
	}
	ep.abortRouting() // the read failed: the reader unwinds
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrPeer)
	default:
		t.Fatal("a canceled inbound was not finished when its route was aborted: its future never resolves")
	}
}
