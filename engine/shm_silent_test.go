package engine

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/wire"
)

// TestShmSilentPeerDoesNotHoldTransferSlots: over "unix", a Put to a
// peer's Gaudi memory is performed by the peer, and waits on one of the
// engine's transfer slots for its answer. A peer that stays connected
// and never answers used to keep each slot after its caller gave up, until
// the endpoint ended: 64 such Puts locked every other endpoint out of
// remote Gaudi memory. A caller that gives up now gives its slot back,
// and the bounce buffers of the unanswered requests go after PeerTimeout
// while the peer (heartbeating) stays connected.
func TestShmSilentPeerDoesNotHoldTransferSlots(t *testing.T) {
	ctx := context.Background()
	owner := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	dev, err := owner.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	k, err := dev.Export()
	require.NoError(t, err)

	const peerTimeout = 500 * time.Millisecond
	user := newEngine(t, Config{Devices: DevicesNone, PeerTimeout: peerTimeout})
	hello := rawHello(uint32(os.Getpid()))
	hello.Caps |= wire.CapHeartbeat
	path, peers := listenRaw(t, hello)
	silent, err := user.Dial(ctx, "unix", path)
	require.NoError(t, err)
	defer silent.Close()
	raw := <-peers
	defer raw.c.Close()
	stop := make(chan struct{})
	var beats sync.WaitGroup
	beats.Go(func() { // the peer is alive; it just never answers
		tk := time.NewTicker(peerTimeout / 10)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if raw.c.Send(&wire.Heartbeat{}) != nil {
					return
				}
			}
		}
	})
	defer beats.Wait()
	defer close(stop)
	forged := k // the silent peer's own Gaudi key, as far as the user can tell
	forged.k.Owner = hello.EngineID
	src, _ := user.Alloc(4096, Host)

	const n = 64 + 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			errs[i] = silent.PutSync(c, src.Slice(0, 16), forged.Slice(0, 16))
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.ErrorIs(t, err, ErrTimeout, "put %d to the silent peer", i)
	}

	honest, err := user.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	defer honest.Close()
	fill(src.Bytes(), 5)
	c, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	require.NoError(t, honest.PutSync(c, src.Slice(0, 16), k.Slice(0, 16)), "a put to an honest peer's Gaudi memory")
	back, _ := owner.Alloc(16, Host)
	require.NoError(t, owner.Copy(ctx, back.All(), dev.Slice(0, 16)).Wait(ctx))
	require.Equal(t, src.Bytes()[:16], back.Bytes())

	// The unanswered requests' bounce buffers go after PeerTimeout; the
	// silent peer's endpoint is still up.
	live := func() int {
		user.mu.Lock()
		defer user.mu.Unlock()
		return len(user.buffers)
	}
	deadline := time.Now().Add(10 * peerTimeout)
	for live() > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, 1, live(), "bounce buffers of unanswered requests still held")
	require.NoError(t, silent.Err(), "the heartbeating peer's endpoint stays up")
}
