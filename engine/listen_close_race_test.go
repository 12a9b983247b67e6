package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestListenRacingCloseLeavesNoListener: a Listen that runs while the
// engine closes either fails with ErrClosed or returns a listener that
// Close closed. Before, a Listen that had checked the engine was open
// registered its listener after Close had taken the list of listeners:
// that listener stayed open (its socket and accept loop leaked) on a
// closed engine.
func TestListenRacingCloseLeavesNoListener(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			dir := t.TempDir()
			for i := range 30 {
				e, err := New(Config{Devices: DevicesNone})
				require.NoError(t, err)
				addr := "127.0.0.1:0"
				if network == "unix" {
					addr = filepath.Join(dir, fmt.Sprintf("%d.sock", i))
				}
				var l *Listener
				var lerr error
				var wg sync.WaitGroup
				start := make(chan struct{})
				wg.Go(func() { <-start; l, lerr = e.Listen(network, addr) })
				wg.Go(func() { <-start; _ = e.Close() })
				close(start)
				wg.Wait()
				if lerr != nil {
					require.ErrorIs(t, lerr, ErrClosed)
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err = l.Accept(ctx)
				cancel()
				_ = l.Close()
				require.ErrorIs(t, err, ErrClosed, "iteration %d: the listener outlived its engine's Close", i)
			}
		})
	}
}
