package handshake

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// An endpoint evicted while its Connect ran (to make room for a newer
// peer, Config.MaxPeers) is failed once made; Accept must not hand it
// out as a new endpoint.
func TestEvictedWhileConnectingNotAccepted(t *testing.T) {
	for _, tc := range []struct {
		name string
		// releaseFirst: the evicted one's Connect ends before Accept
		// takes the newer endpoint, with nothing ordering it after the
		// eviction's look at the victim (admit read the victim's
		// endpoint after it let go of the lock: a data race with its
		// Connect's end).
		releaseFirst bool
	}{{"released after Accept", false}, {"released before Accept", true}} {
		t.Run(tc.name, func(t *testing.T) { testEvictedWhileConnecting(t, tc.releaseFirst) })
	}
}

func testEvictedWhileConnecting(t *testing.T, releaseFirst bool) {
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	entered, release := make(chan struct{}, 2), make(chan struct{})
	var started atomic.Bool
	connect := func(ctx context.Context, wc *wire.Conn, h wire.Hello, path datapath.Kind, addr string, dialer bool) (*peer, Peer, error) {
		if !started.Swap(true) { // the first connection's Connect waits (only the listener's goroutines run it)
			entered <- struct{}{}
			<-release
		}
		return ls.connect(ctx, wc, h, path, addr, dialer)
	}
	l, err := Listen(ListenConfig[*peer]{Local: ls.local, Network: "unix", Addr: filepath.Join(t.TempDir(), "l.sock"), MaxPeers: 1, Connect: connect})
	require.NoError(t, err)
	defer l.Close()

	go func() { _, _ = ds.dial(l, "unix", 0, false) }()
	<-entered                             // admitted, connecting
	_, err = ds.dial(l, "unix", 0, false) // evicts the first: admitted, no endpoint yet
	require.NoError(t, err)
	if releaseFirst {
		close(release)
	}
	a, err := l.Accept(context.Background())
	require.NoError(t, err)
	require.NoError(t, a.Err(), "the newer endpoint is up")
	if !releaseFirst {
		close(release)
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ev, err := l.Accept(short)
	if err == nil {
		t.Fatalf("Accept returned the evicted endpoint (its error: %v)", ev.Err())
	}
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestAcceptSkipsEndpointBeingEvicted: an endpoint the listener is
// closing to make room for a newcomer is not handed to Accept while its
// Bye is on the way (ctrlchan's Evict waits for it, longer for a peer
// that reads slowly, and fails the endpoint only then): it would fail
// moments after Accept returned it. Accept returns the newcomer, which
// the eviction (off the newcomer's handshake) does not hold up.
func TestAcceptSkipsEndpointBeingEvicted(t *testing.T) {
	h := holdEvictions(t)
	defer h.release() // before the listener's Close (a Cleanup), which waits for the eviction
	ls, ds, l, entered, release := h.ls, h.ds, h.l, h.entered, h.release
	require.Eventually(t, func() bool { return l.queueLen() == 1 }, 5*time.Second, time.Millisecond)
	_, err := ds.dial(l, "unix", 0, false)
	require.NoError(t, err)
	<-entered
	require.Eventually(t, func() bool { return len(ls.all()) == 2 }, 5*time.Second, time.Millisecond)
	victim := ls.all()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a hang guard only
	defer cancel()
	p, err := l.Accept(ctx)
	require.NoError(t, err)
	require.NoError(t, victim.Err(), "its eviction is still held")
	if p == victim {
		t.Fatal("Accept returned the endpoint being closed to make room")
	}
	require.NoError(t, p.Err())
	require.Same(t, ls.all()[1], p, "the newcomer")
	release()
}

// TestServingWhileConnectingNotEvicted: a listener's endpoint may serve
// its dialer's requests before its Connect returns (the engine starts it
// there, and the dialer may make requests once it has the ack). One that
// did is not closed to make room as one still connecting (it was closed
// so, "it made no request", before Connect told the listener it was made:
// Made): a newcomer at the bound is refused, and the busy endpoint stays.
func TestServingWhileConnectingNotEvicted(t *testing.T) {
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	entered, hold := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	connect := func(ctx context.Context, wc *wire.Conn, h wire.Hello, path datapath.Kind, addr string, dialer bool) (*peer, Peer, error) {
		p, pp, err := ls.connect(ctx, wc, h, path, addr, dialer)
		if err == nil && !first.Swap(true) {
			p.pulse.Store(true) // it served a request of its dialer's
			close(entered)
			<-hold
		}
		return p, pp, err
	}
	l, err := Listen(ListenConfig[*peer]{Local: ls.local, Network: "unix", Addr: filepath.Join(t.TempDir(), "l.sock"),
		MaxPeers: 1, MaxPeersPerSource: 1, Connect: connect})
	require.NoError(t, err)
	defer l.Close()
	defer release() // before the listener's Close, which waits for its handshakes

	dialed := make(chan error, 1)
	go func() { _, err := ds.dial(l, "unix", 0, false); dialed <- err }()
	<-entered
	require.NoError(t, <-dialed)
	_, err = ds.dial(l, "unix", 0, false)
	require.ErrorIs(t, err, gxerr.TooManyPeers, "the only endpoint served a request")
	release()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a hang guard only
	defer cancel()
	a, err := l.Accept(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Err(), "the busy endpoint is up")
	require.Same(t, ls.all()[0], a)
}
