package engine

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCloseWaitsForFreeInProgress: Close returned while a Free begun
// before it was still releasing its buffer (Close's own release of it, or
// of a buffer Free had already taken out of its books, returned at once),
// so the buffer's memory was still mapped once Close had returned, and its
// release overlapped Close's closing of the caches, transports and
// devices. Free is paused inside its release; Close must wait for it.
func TestCloseWaitsForFreeInProgress(t *testing.T) {
	for _, tc := range []struct {
		name        string
		beforeBooks bool // Free pauses before the buffer leaves the engine's books
	}{
		{"still booked", true}, // Close finds it: its destroy returned at once
		{"out of books", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			b, err := e.Alloc(1<<20, Host)
			require.NoError(t, err)
			require.NotNil(t, b.shm.Bytes())
			entered, release := make(chan struct{}), make(chan struct{})
			hook := func(x *Buffer, booked bool) {
				if x == b && booked == tc.beforeBooks {
					close(entered)
					<-release
				}
			}
			e.hookDestroy.Store(&hook)
			var once sync.Once
			waits := func() { once.Do(func() { close(release) }) } // Close waits: let Free go on
			e.hookDrain.Store(&waits)
			freed := make(chan error, 1)
			go func() { freed <- b.Free() }()
			<-entered
			closeErr := e.Close()
			stillMapped := b.shm.Bytes() != nil
			once.Do(func() { close(release) }) // without the wait: let Free end now
			require.NoError(t, <-freed)
			require.NoError(t, closeErr)
			require.False(t, stillMapped, "Close returned while Free was still releasing the buffer (still mapped)")
		})
	}
}
