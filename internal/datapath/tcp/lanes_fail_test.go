package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// TestLaneTransferEndsWithEndpointFailure: a transfer on a lane of an
// endpoint that failed (its peer went silent) ends with the endpoint's
// failure, which the application retries on, even when the endpoint's
// reader ends (and closes the lanes) before the goroutine Failed starts
// to fail the lanes has run. Before, the reader's Closed closed the lanes
// first and the transfer ended with "endpoint closed" (gxerr.Closed). An
// endpoint the application closes still ends them with gxerr.Closed.
func TestLaneTransferEndsWithEndpointFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want []error
	}{
		{"peer silent", gxerr.New(gxerr.Peer, "fake: silent", gxerr.Timeout), []error{gxerr.Peer, gxerr.Timeout}},
		{"closed", gxerr.New(gxerr.Closed, "endpoint closed", nil), []error{gxerr.Closed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := pair(t, 1<<20, listCaps)
			la, _ := rawPeer(t, true, 0) // its peer never answers
			la.path.parent = a.path
			a.path.mu.Lock()
			a.path.lanes = []lane{{c: la, p: la.path}}
			a.path.mu.Unlock()

			// A Get on the lane, in flight until the lane ends.
			dst := &hostBuf{mem: make([]byte, 4096)}
			c := newCompletion()
			la.path.Start(context.Background(), datapath.Req{Local: datapath.Mem{B: dst, Len: 4096}, Key: hostKey(4096)}, c)

			// The goroutine Failed starts runs after the reader's Closed.
			hold := make(chan struct{})
			a.env.hold.Store(&hold)
			a.Fail(tc.err)
			select {
			case <-a.readEnd:
			case <-time.After(10 * time.Second):
				close(hold)
				t.Fatal("the endpoint's reader did not end")
			}
			close(hold)
			err := c.wait(t)
			for _, want := range tc.want {
				require.ErrorIs(t, err, want)
			}
			<-la.Done()
			for _, want := range tc.want {
				require.ErrorIs(t, la.Err(), want)
			}
		})
	}
}
