package engine

import (
	"context"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/testutil"
)

// TestDialFailureIsTyped: a Dial that cannot reach its peer fails with an
// error matching ErrPeer (and still the cause), on both networks.
func TestDialFailureIsTyped(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	// A TCP port nobody listens on: bind one, note it, close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadTCP := l.Addr().String()
	require.NoError(t, l.Close())
	for _, tc := range []struct {
		network, addr string
		cause         error
	}{
		{"tcp", deadTCP, syscall.ECONNREFUSED},
		{"unix", filepath.Join(t.TempDir(), "nobody.sock"), nil},
	} {
		t.Run(tc.network, func(t *testing.T) {
			_, err := e.Dial(context.Background(), tc.network, tc.addr)
			require.ErrorIs(t, err, ErrPeer)
			if tc.cause != nil {
				require.ErrorIs(t, err, tc.cause)
			}
		})
	}
}

// silent is testutil.SilentListener: a peer that accepts the connection
// and never answers the handshake.
func silent(t *testing.T, network, addr string) string {
	return testutil.SilentListener(t, network, addr)
}

// TestDialHandshakeBounded: a Dial without a deadline of its own to a
// peer that accepts the connection and never answers the handshake ends
// after the 5 s dial bound with ErrTimeout (its kind) and ErrPeer, as a
// connect unanswered by then does, on both networks; it failed with
// ErrPeer alone. (Both Dials run at once: one 5 s wait.)
func TestDialHandshakeBounded(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP})
	cases := []struct{ network, addr string }{
		{"tcp", silent(t, "tcp", "127.0.0.1:0")},
		{"unix", silent(t, "unixpacket", filepath.Join(t.TempDir(), "s.sock"))},
	}
	errs := make([]chan error, len(cases))
	for i, tc := range cases {
		errs[i] = make(chan error, 1)
		go func() {
			_, err := e.Dial(context.Background(), tc.network, tc.addr)
			errs[i] <- err
		}()
	}
	for i, tc := range cases {
		err := <-errs[i]
		require.ErrorIs(t, err, ErrTimeout, tc.network)
		require.ErrorIs(t, err, ErrPeer, tc.network)
		require.Equal(t, "timeout", gxerr.KindName(gxerr.KindOf(err)), tc.network)
	}
}

// TestDialCtxEndIsTyped: a Dial whose ctx ends while the peer has not
// answered its handshake (a listener that accepts and stays silent) fails
// with ErrTimeout for ctx's deadline and ErrCanceled for a cancel, as
// every call bounded by a ctx does, still wrapping ctx's error; it used to
// fail with ErrPeer, as if the peer had failed.
func TestDialCtxEndIsTyped(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	for _, tc := range []struct {
		name, network string
		addr          func(t *testing.T) string
		end           func() (context.Context, context.CancelFunc)
		kind, cause   error
	}{
		{"unix deadline", "unix", func(t *testing.T) string { return silent(t, "unixpacket", filepath.Join(t.TempDir(), "s.sock")) },
			func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 100*time.Millisecond)
			}, ErrTimeout, context.DeadlineExceeded},
		{"tcp deadline", "tcp", func(t *testing.T) string { return silent(t, "tcp", "127.0.0.1:0") },
			func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 100*time.Millisecond)
			}, ErrTimeout, context.DeadlineExceeded},
		{"tcp cancel", "tcp", func(t *testing.T) string { return silent(t, "tcp", "127.0.0.1:0") },
			func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
				return ctx, cancel
			}, ErrCanceled, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr(t)
			ctx, cancel := tc.end()
			defer cancel()
			_, err := e.Dial(ctx, tc.network, addr)
			require.ErrorIs(t, err, tc.kind)
			require.ErrorIs(t, err, tc.cause)
			require.NotErrorIs(t, err, ErrPeer)
		})
	}
}

// TestNilDialOption: a nil DialOption (a conditionally built option list)
// is skipped, as a nil OpOption is; it panicked in Dial.
func TestNilDialOption(t *testing.T) {
	owner := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP})
	e := newEngine(t, Config{Devices: DevicesNone, Transport: TransportTCP})
	ln, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var ep *Endpoint
	p := func() (p any) {
		defer func() { p = recover() }()
		ep, err = e.Dial(context.Background(), "tcp", ln.Addr(), nil)
		return nil
	}()
	require.Nil(t, p, "Dial panicked on a nil option")
	require.NoError(t, err)
	require.NoError(t, ep.Close())
}
