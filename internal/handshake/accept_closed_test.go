package handshake

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// TestAcceptAfterClose: once the listener is closed, Accept fails with
// Closed even while endpoints that nobody accepted are queued (they stay
// open, as Close says). Its select picked at random between the queue
// and the listener's end, so about half the calls returned a queued
// endpoint.
func TestAcceptAfterClose(t *testing.T) {
	const n = 20
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	l := ls.listen(t, "unix", 2*n, false)
	for range n {
		_, err := ds.dial(l, "unix", datapath.KindAuto, false)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return l.queueLen() == n }, 5*time.Second, time.Millisecond)
	require.NoError(t, l.Close())
	for i := range n {
		_, err := l.Accept(context.Background())
		require.ErrorIs(t, err, gxerr.Closed, "Accept %d after Close", i)
	}
}
