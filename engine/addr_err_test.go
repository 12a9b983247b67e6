package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBadAddressIsInvalid: an address that cannot name a socket (an empty,
// abstract or over-long unix path; a TCP address without a valid port)
// makes Listen and Dial fail with ErrInvalid, the caller's mistake. Listen
// returned an error of no kind, and Dial one matching ErrPeer, as if a
// peer had failed.
func TestBadAddressIsInvalid(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	for _, tc := range []struct{ name, network, addr string }{
		{"empty unix path", "unix", ""},
		{"abstract unix path", "unix", "@gxfer"},
		{"unix path too long", "unix", "/" + strings.Repeat("a", 200)},
		{"tcp without port", "tcp", "127.0.0.1"},
		{"tcp port out of range", "tcp", "127.0.0.1:99999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Listen(tc.network, tc.addr)
			require.ErrorIs(t, err, ErrInvalid, "Listen")
			_, err = e.Dial(context.Background(), tc.network, tc.addr)
			require.ErrorIs(t, err, ErrInvalid, "Dial")
			require.NotErrorIs(t, err, ErrPeer, "Dial")
		})
	}
}
