package datapath

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Gate counts the copies that touch memory outside the engine's queues,
// on callers' goroutines (small host copies, bindings' Puts and Gets):
// the engine's Close sets its closed flag, then waits until no copy is
// admitted before it unmaps any buffer, so no copy ever touches memory
// Close released. A copy that got in finishes; one that comes after is
// refused.
//
// Enter adds to the count before it reads closed, and Close stores closed
// before it reads the count (both sequentially consistent): either the
// copy sees closed, or Close sees the copy. The fast path is two atomic
// adds and a load, with no lock, allocation or indirect call (data paths
// call it on their hot path, so it is a concrete type, not an interface
// method); the counter has a cache line of its own.
type Gate struct {
	_      [64]byte
	n      atomic.Int64
	_      [56]byte
	closed *atomic.Bool
	hook   atomic.Pointer[func()]
}

// Init ties the gate to the flag Close sets.
func (g *Gate) Init(closed *atomic.Bool) { g.closed = closed }

// Enter admits a copy unless the engine is closing; an admitted copy must
// call Exit.
func (g *Gate) Enter() bool {
	g.n.Add(1)
	if g.closed.Load() {
		g.n.Add(-1)
		return false
	}
	return true
}

// Exit ends an admitted copy.
func (g *Gate) Exit() { g.n.Add(-1) }

// Closing reports whether the engine has begun closing: a caller admitted
// for a run of copies (a held binding) checks it before each one, and
// exits once it is set, since Close waits for it (a load, no
// read-modify-write).
func (g *Gate) Closing() bool { return g.closed.Load() }

// Hook runs the test hook (SetHook), if any: admitted copies call it
// before they touch memory.
func (g *Gate) Hook() {
	if h := g.hook.Load(); h != nil {
		(*h)()
	}
}

// SetHook sets (nil: clears) the hook admitted copies run (tests).
func (g *Gate) SetHook(h *func()) { g.hook.Store(h) }

// Drain waits (after the closed flag is set) until no copy is admitted.
// Admitted copies are short, so it backs off from yielding to sleeping up
// to a millisecond; onWait (if not nil) runs once when there is a wait.
func (g *Gate) Drain(onWait func()) {
	if g.n.Load() == 0 {
		return
	}
	if onWait != nil {
		onWait()
	}
	for i := 0; g.n.Load() != 0; i++ {
		if i < 64 {
			runtime.Gosched()
			continue
		}
		time.Sleep(min(time.Duration(i-63)*10*time.Microsecond, time.Millisecond))
	}
}

// Admitted is how many copies are admitted now.
func (g *Gate) Admitted() int64 { return g.n.Load() }
