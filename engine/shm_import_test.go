package engine

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/wire"
)

// TestShmImportWaiterOwnCtx: two Puts to a peer's allocation that is not
// imported yet share one import (the handle cache's singleflight). The
// second must still be bounded by its own ctx and deadline, and must not
// fail with the first caller's cancellation.
func TestShmImportWaiterOwnCtx(t *testing.T) {
	for _, tc := range []struct {
		name string
		// first is the ctx of the Put that imports; it ends after end.
		end time.Duration
		// second's options
		timeout time.Duration
		check   func(t *testing.T, err error, took time.Duration)
	}{
		{"deadline of the waiter", 3 * time.Second, 200 * time.Millisecond, func(t *testing.T, err error, took time.Duration) {
			require.ErrorIs(t, err, ErrTimeout)
			require.Less(t, took, 1500*time.Millisecond, "the second Put waited for the first one's import, past its own deadline")
		}},
		{"first caller canceled", 300 * time.Millisecond, 2 * time.Second, func(t *testing.T, err error, took time.Duration) {
			require.NotErrorIs(t, err, ErrCanceled, "the second Put failed with the first caller's cancellation")
			require.ErrorIs(t, err, ErrTimeout)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{Devices: DevicesNone})
			h := rawHello(uint32(os.Getpid()))
			path, ch := listenRaw(t, h)
			ep, err := e.Dial(context.Background(), "unix", path)
			require.NoError(t, err)
			p := <-ch
			defer p.c.Close()
			k := RemoteKey{k: wire.RemoteKey{Owner: h.EngineID, AllocID: 7, Generation: 1, MemType: wire.MemHost, Device: -1,
				Flags: wire.KeyRead | wire.KeyWrite, Length: 4096, GrantLen: 4096, Len: 4096}}
			local, err := e.Alloc(4096, Host)
			require.NoError(t, err)

			// The first Put imports; the peer never answers.
			ctx1, cancel1 := context.WithCancel(context.Background())
			defer cancel1()
			first := make(chan *Future, 1)
			go func() { first <- ep.Put(ctx1, local.All(), k) }()
			_, m := p.recv(t)
			require.IsType(t, &wire.ImportRequest{}, m)
			timer := time.AfterFunc(tc.end, cancel1)
			defer timer.Stop()

			t0 := time.Now()
			err = ep.Put(context.Background(), local.All(), k, Timeout(tc.timeout)).Wait(context.Background())
			took := time.Since(t0)
			t.Logf("second Put: %v after %v", err, took)
			cancel1()
			<-(<-first).Done()
			tc.check(t, err, took)
		})
	}
}
