package ctrlchan

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/wire"
)

// TestRoundTripSendCtx: a RoundTrip whose request cannot be written (the
// peer reads nothing) returns when its ctx ends, not when the write
// times out (never, without a write timeout), and the request is
// forgotten.
func TestRoundTripSendCtx(t *testing.T) {
	env := &dptest.Env{}
	c, raw := newChan(t, env, true, &fakePath{}) // raw is never read: the request's write blocks
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		_ = raw.Close()
		env.Wait()
	})
	id := c.NewID()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := c.RoundTrip(ctx, id, &wire.Get{Request: req(id, wire.LocalInline)})
		errc <- err
	}()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(5 * time.Second):
		t.Fatal("RoundTrip did not return when its ctx ended")
	}
	c.mu.Lock()
	_, pending := c.pending[id]
	c.mu.Unlock()
	require.False(t, pending, "the request is forgotten")
}
