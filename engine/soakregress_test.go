package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

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
