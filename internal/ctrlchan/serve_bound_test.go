package ctrlchan

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/wire"
)

// TestServeRepliesBounded: a peer that sends requests and never reads its
// replies. Serve gives its slot back before the reply goes out, so each
// request answered at once leaves a goroutine blocked in Send (with its
// reply) and frees the slot for the next: the peer grows this side's
// goroutines without bound (until the write timeout, 10s by default in an
// engine). They must stay within MaxServing plus the reply bound (or the
// channel fail, as a full reply queue does).
func TestServeRepliesBounded(t *testing.T) {
	env := &dptest.Env{}
	var handled, served atomic.Int32
	p := &fakePath{}
	p.handle = func(m wire.Message) (bool, error) {
		put, ok := m.(*wire.Put)
		if !ok {
			return false, nil
		}
		defer handled.Add(1)
		id := put.RequestID
		if p.c.Serve(func() wire.Message { served.Add(1); return &wire.Completion{RequestID: id} }) {
			return true, nil
		}
		return true, p.c.QueueReply(wire.NewError(id, wire.StatusNoResources, "too many requests in progress"))
	}
	before := runtime.NumGoroutine()
	c, raw := newChan(t, env, false, p)
	t.Cleanup(func() {
		_ = c.Close()
		_ = raw.Close()
		env.Wait()
	})
	peer := wire.NewConn(wire.NewStreamTransport(raw), wire.ConnConfig{})
	const n = 2000
	sent := 0
	for i := range n {
		if err := peer.Send(&wire.Put{Request: req(uint64(2*i+1), wire.LocalInline)}); err != nil {
			break // the channel failed the peer: fine
		}
		sent++
		// A paced peer: the next request once this one was answered (its
		// reply then waits to be sent, the slot free).
		waitFor(t, "the request to be served", func() bool { return c.Err() != nil || served.Load() == int32(sent) })
	}
	waitFor(t, "the reader to take every request", func() bool { return c.Err() != nil || handled.Load() == int32(sent) })
	time.Sleep(50 * time.Millisecond) // the served goroutines reach Send
	alive := runtime.NumGoroutine() - before
	t.Logf("alive %d sent %d handled %d err %v", alive, sent, handled.Load(), c.Err())
	require.LessOrEqual(t, alive, 2*MaxServing+16,
		"goroutines kept alive by a peer that does not read (channel error %v, %d requests sent)", c.Err(), sent)
}
