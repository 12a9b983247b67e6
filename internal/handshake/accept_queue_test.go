package handshake

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
)

// TestAcceptReturnsEveryEndpoint: every endpoint a peer opens is handed
// to Accept, however many arrived before the application called it
// (within MaxPeers). Accept's queue held 64 and the listener dropped
// every endpoint beyond it without a word: the endpoint was served, its
// dialer saw it open, but the application never learnt of it (a
// coordinator accepting its workers after they connected waited for
// ever; a peer that opened 64 idle endpoints had every later one
// dropped).
func TestAcceptReturnsEveryEndpoint(t *testing.T) {
	const n = 70
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	l := ls.listen(t, "unix", n, false)
	for range n {
		_, err := ds.dial(l, "unix", datapath.KindAuto, false)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(ls.all()) == n }, 5*time.Second, time.Millisecond)
	seen := map[*peer]bool{}
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a hang guard only
		p, err := l.Accept(ctx)
		cancel()
		require.NoError(t, err, "Accept %d of %d", i+1, n)
		require.False(t, seen[p], "endpoint accepted twice")
		seen[p] = true
	}
}

// TestAcceptQueueHoldsLiveEndpoints: endpoints that failed before Accept
// took them (their peer left, or they were closed to make room) are
// dropped as the next one is queued, so that what waits for Accept is
// bounded by the live endpoints (MaxPeers), not by how many peers came
// and went.
func TestAcceptQueueHoldsLiveEndpoints(t *testing.T) {
	const n = 10
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	l := ls.listen(t, "unix", n, false)
	for range n {
		_, err := ds.dial(l, "unix", datapath.KindAuto, false)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(ls.all()) == n && l.queueLen() == n }, 5*time.Second, time.Millisecond)
	for _, p := range ls.all() {
		p.Fail(errors.New("peer left"))
	}
	_, err := ds.dial(l, "unix", datapath.KindAuto, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return l.queueLen() == 1 }, 5*time.Second, time.Millisecond,
		"the failed endpoints were dropped as the next was queued")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := l.Accept(ctx)
	require.NoError(t, err)
	require.Same(t, ls.all()[n], p)
	require.NoError(t, p.Err())
}

// queueLen is how many endpoints wait for Accept.
func (l *Listener[P]) queueLen() int {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	return len(l.queue)
}

// TestCloseDropsAcceptQueue: Close lets go of the endpoints no Accept
// took (Accept can no longer return them); the queue held them, the
// failed ones among them, for as long as the Listener was referenced.
func TestCloseDropsAcceptQueue(t *testing.T) {
	const n = 5
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	l := ls.listen(t, "unix", n, false)
	for range n {
		_, err := ds.dial(l, "unix", datapath.KindAuto, false)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(ls.all()) == n }, 5*time.Second, time.Millisecond)
	require.NoError(t, l.Close())
	l.qmu.Lock()
	left := len(l.queue)
	l.qmu.Unlock()
	require.Zero(t, left, "endpoints kept after Close")
}
