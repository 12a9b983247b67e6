package staging

import (
	"bytes"
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/dptest"
)

// slowFailEnv fails every allocation; the first one only once the test
// lets it (it signals entered, then waits for release).
type slowFailEnv struct {
	*dptest.Env
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (e *slowFailEnv) AllocHost(uint64) (datapath.Buf, error) {
	if e.calls.Add(1) == 1 {
		close(e.entered)
		<-e.release
	}
	return nil, errNoMemory
}

// waitSelecting returns once a goroutine is parked in the select of
// Pool.Get (waiting for a buffer to come back).
func waitSelecting(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		for _, g := range bytes.Split(buf[:n], []byte("\n\n")) {
			if bytes.Contains(g, []byte("[select")) && bytes.Contains(g, []byte("staging.(*Pool).Get(")) {
				return
			}
		}
		runtime.Gosched()
	}
}

// TestPoolGetAllocFailsConcurrently: a Get that found every buffer slot
// being made by another Get, whose allocation then fails, has nothing to
// wait for (no buffer was ever made, none can come back): it tries again
// and fails with the allocation's error, as the other Get does. It used
// to wait for a buffer that could never come, until its ctx or done ended
// (an inbound transfer with a background ctx: until the connection ended).
func TestPoolGetAllocFailsConcurrently(t *testing.T) {
	env := &slowFailEnv{Env: &dptest.Env{}, entered: make(chan struct{}), release: make(chan struct{})}
	p := NewPool(env, 1, chunk)
	first := make(chan error, 1)
	go func() {
		_, err := p.Get(context.Background(), nil)
		first <- err
	}()
	<-env.entered // the only slot is being made
	// A liveness bound: the second Get must end long before it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	second := make(chan error, 1)
	go func() {
		_, err := p.Get(ctx, nil)
		second <- err
	}()
	waitSelecting(t) // the second Get waits for a buffer
	close(env.release)
	require.ErrorIs(t, <-first, errNoMemory)
	require.ErrorIs(t, <-second, errNoMemory, "the second Get waited for a buffer that was never made")
	require.NoError(t, p.Close())
}
