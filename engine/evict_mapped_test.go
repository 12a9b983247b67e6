package engine

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPeerIdleEvictSparesMappedUse: a unix peer that keeps moving data
// into the listener's memory through its mapping (a Held binding's Puts,
// Puts on a key it imported already), which sends no frame, is busy: at
// MaxPeers a newcomer is refused with ErrTooManyPeers long after
// PeerIdleEvict, and the peer's Puts all succeed.
func TestPeerIdleEvictSparesMappedUse(t *testing.T) {
	tests := []struct {
		name string
		put  func(ep *Endpoint, h *Held, src *Buffer, k RemoteKey) error
	}{
		{"held binding", func(_ *Endpoint, h *Held, _ *Buffer, _ RemoteKey) error { return h.Put() }},
		{"mapped put", func(ep *Endpoint, _ *Held, src *Buffer, k RemoteKey) error {
			return ep.PutSync(context.Background(), src.All(), k)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			const idle = time.Second
			// Heartbeats (and the dialer's report of its use) each 250 ms.
			owner := newEngine(t, Config{Devices: DevicesNone, MaxPeers: 1, PeerIdleEvict: idle, PeerTimeout: time.Second})
			peer := newEngine(t, Config{Devices: DevicesNone, PeerTimeout: time.Second})
			other := newEngine(t, Config{Devices: DevicesNone})
			l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
			require.NoError(t, err)
			defer l.Close()
			dst, err := owner.Alloc(4096, Host)
			require.NoError(t, err)
			k, err := dst.Export()
			require.NoError(t, err)
			src, err := peer.Alloc(4096, Host)
			require.NoError(t, err)
			ep, err := peer.Dial(ctx, "unix", l.Addr())
			require.NoError(t, err)
			defer ep.Close()
			require.NoError(t, ep.PutSync(ctx, src.All(), k)) // imports: the mapping is made
			b, err := ep.Bind(ctx, src.All(), k)
			require.NoError(t, err)
			defer b.Close()

			var stop atomic.Bool
			var puts int
			var putErr error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := b.Hold()
				if err != nil {
					putErr = err
					return
				}
				defer h.Release()
				for !stop.Load() {
					if putErr = tt.put(ep, h, src, k); putErr != nil {
						return
					}
					puts++
					time.Sleep(time.Millisecond)
				}
			}()
			time.Sleep(3 * idle) // idle for PeerIdleEvict twice over, were the Puts not seen
			_, err = other.Dial(ctx, "unix", l.Addr())
			stop.Store(true)
			wg.Wait()
			require.ErrorIs(t, err, ErrTooManyPeers)
			require.NoError(t, putErr)
			require.NoError(t, ep.Err())
			require.Positive(t, puts)
		})
	}
}
