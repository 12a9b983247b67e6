//go:build race

package wire

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRaceStreamOrder: what a stream's sender did before it sent a frame
// is ordered, for the race detector, before what its peer does once it
// has read it, as the kernel orders them. A payload goes out with writev
// and comes in with readv, neither of which tells the detector anything
// by itself: without the stream's own ordering (internal/racesync) the
// receiver's read of note races with the sender's write and the test
// fails with "race detected during execution of test". (A tcp Put's
// landing looked unordered with the caller's earlier use of its
// destination in the same way: TestQueuedPutAbandoned in
// internal/datapath/tcp failed so in CI.)
func TestRaceStreamOrder(t *testing.T) {
	const size = 256 << 10 // large enough for writev and readv
	for _, tc := range []struct {
		name   string
		routed bool
	}{
		{"routed payload", true},
		{"whole frame", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tcpPair(t)
			ca, cb := NewConn(NewStreamTransport(a), ConnConfig{}), NewConn(NewStreamTransport(b), ConnConfig{})
			t.Cleanup(func() {
				_ = ca.Close()
				_ = cb.Close()
			})
			src := bytes.Repeat([]byte("0123456789abcdef"), size/16)
			note := make([]byte, 8) // the sender writes it before it sends
			errc := make(chan error, 1)
			go func() {
				note[0] = 1
				errc <- ca.SendData(1, 0, src)
			}()
			dst := make([]byte, size)
			var (
				f   Frame
				err error
			)
			if tc.routed {
				f, err = cb.RecvRouted(context.Background(), func(id, off uint64, n int) ([]byte, error) {
					return dst[off : off+uint64(n)], nil
				})
			} else {
				f, err = cb.Recv(context.Background())
			}
			require.NoError(t, err)
			require.Equal(t, byte(1), note[0], "the sender's write before it sent")
			if tc.routed {
				require.True(t, f.Routed)
				require.Equal(t, src, dst)
			}
			require.NoError(t, <-errc)
		})
	}
}
