package engine

import (
	"runtime"
	"sync/atomic"
	"time"
)

// closeGate counts the calls that may touch host memory outside the
// engine's queues: Copy and Batch.Submit (host-to-host copies run on the
// caller's goroutine), host workers' copies and Binding Puts and Gets over
// "unix". Close sets Engine.closed, then waits for the count to reach zero
// before it unmaps any buffer, so that no copy ever touches memory Close
// has released: a call that got in finishes; one that comes after fails
// with ErrClosed.
//
// enter adds to the count before it reads closed, and Close stores closed
// before it reads the count (both sequentially consistent): either the
// call sees closed, or Close sees the call. The fast path is two atomic
// adds and a load, with no lock and no allocation; the counter has a cache
// line of its own, so that its writes do not evict closed and its
// neighbours from other cores' caches.
type closeGate struct {
	_ [64]byte
	n atomic.Int64
	_ [56]byte
}

// enter admits a call unless the engine is closed; an admitted call must
// call exit.
func (e *Engine) enter() bool {
	e.gate.n.Add(1)
	if e.closed.Load() {
		e.gate.n.Add(-1)
		return false
	}
	return true
}

func (e *Engine) exit() { e.gate.n.Add(-1) }

// gateHook runs the test hook inside an admitted call, before it touches
// memory.
func (e *Engine) gateHook() {
	if h := e.hookGate.Load(); h != nil {
		(*h)()
	}
}

// drainGate waits (Close, after closed is set) until every admitted call
// has left. Such calls are copies in progress or submissions that end
// once the queues are closed, so the wait is short; it backs off from
// yielding to sleeping up to a millisecond.
func (e *Engine) drainGate() {
	if e.gate.n.Load() == 0 {
		return
	}
	if h := e.hookDrain.Load(); h != nil {
		(*h)()
	}
	for i := 0; e.gate.n.Load() != 0; i++ {
		if i < 64 {
			runtime.Gosched()
			continue
		}
		time.Sleep(min(time.Duration(i-63)*10*time.Microsecond, time.Millisecond))
	}
}
