package handshake

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/testutil"
)

// silentListener is a loopback listener that accepts every connection and
// never answers (nor reads): a peer that takes the connect and leaves the
// handshake unanswered.
func silentListener(t *testing.T, network string) string {
	addr, lnet := "127.0.0.1:0", "tcp"
	if network == "unix" {
		addr, lnet = filepath.Join(t.TempDir(), "silent.sock"), "unixpacket"
	}
	return testutil.SilentListener(t, lnet, addr)
}

// TestDialHandshakeBounded: a Dial to a listener that accepts and never
// answers the handshake ends at the Dial's bound (DialConfig.Timeout, or
// ctx's earlier deadline) with an error of kind Timeout that still
// matches Peer and the context's DeadlineExceeded, on both networks, as
// a connect unanswered by then does (TestDialConnectBounded). It failed
// with Peer alone (kind "peer"), so a caller could not tell a silent
// peer from one that failed.
func TestDialHandshakeBounded(t *testing.T) {
	for _, tc := range []struct {
		name, network string
		timeout       time.Duration // DialConfig.Timeout
		ctxTimeout    time.Duration // the caller's ctx
		secret        bool          // the dialer authenticates: it waits for the challenge
	}{
		{"tcp dial bound", "tcp", 200 * time.Millisecond, 20 * time.Second, false},
		{"tcp auth dial bound", "tcp", 200 * time.Millisecond, 20 * time.Second, true},
		{"unix dial bound", "unix", 200 * time.Millisecond, 20 * time.Second, false},
		{"tcp ctx deadline", "tcp", 20 * time.Second, 200 * time.Millisecond, false},
		{"unix ctx deadline", "unix", 20 * time.Second, 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := silentListener(t, tc.network)
			var secret []byte
			if tc.secret {
				secret = []byte("a cluster secret of enough bytes for the test")
				require.NoError(t, CheckSecret(secret))
			}
			ds := newSide(t, secret, false)
			ctx, cancel := context.WithTimeout(context.Background(), tc.ctxTimeout)
			defer cancel()
			_, err := Dial(ctx, DialConfig{Local: ds.local, Network: tc.network, Addr: addr, Want: datapath.KindTCP, Timeout: tc.timeout}, ds.connect)
			require.Error(t, err)
			require.ErrorIs(t, err, gxerr.Timeout)
			require.ErrorIs(t, err, gxerr.Peer)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Equal(t, "timeout", gxerr.KindName(gxerr.KindOf(err)))
			require.Empty(t, ds.all(), "the dialer made no endpoint")
		})
	}
}
