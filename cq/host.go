// Package cq holds completion actors, one goroutine per completion source:
// the device actor polls WAIT_CS on outstanding CS sequence numbers of a
// Gaudi, the host actor applies completion records of host copies. Futures
// themselves belong to the engine; the actors resolve them through the
// callbacks and Completer values they are given.
package cq

import (
	"errors"
	"fmt"
	"sync"
)

// ErrPanic: a completion callback panicked (the engine's ErrPanic).
var ErrPanic = errors.New("gxfer: internal panic")

// Completer is what a completion record resolves: one operation (idx) of a
// counted completion ends with err. It must not block.
type Completer interface {
	Complete(idx int, err error)
}

// HostCompletion reports the end of one host-side operation.
type HostCompletion struct {
	F   Completer
	Idx int
	Err error
	// Then, if set, runs on the actor before the future is completed (e.g.
	// to release references). It must not block, and so must not Post
	// (nor F's Complete): a Post waits for room in the inbox, which only
	// the actor, running the Then, makes, so the actor and every Post
	// would hang once the inbox is full (until Close, which applies
	// later Posts on their callers instead).
	Then func()
}

// HostActor is the completion goroutine of host copies: workers post
// completion records and the actor resolves futures in batches, so that a
// future's waiters are woken from one place.
type HostActor struct {
	in   chan HostCompletion
	mu   sync.RWMutex
	shut bool
	// posting counts the Posts under way (added under mu's read lock
	// while not shut): Close closes in once they have sent.
	posting sync.WaitGroup
	done    chan struct{}
	once    sync.Once
}

// NewHostActor starts a host actor whose inbox holds depth records
// (default 1024 for depth < 1; clamped to MaxDepth).
func NewHostActor(depth int) *HostActor {
	if depth < 1 {
		depth = 1024
	}
	depth = min(depth, MaxDepth)
	h := &HostActor{in: make(chan HostCompletion, depth), done: make(chan struct{})}
	go h.run()
	return h
}

// Post hands over a completion. It waits while the inbox is full, so a
// Then (or Complete) the actor runs must not Post. After Close the
// completion is applied on the caller's goroutine instead.
//
// It waits without the lock: a Post waiting for room held it, so
// Close's write lock waited for it, and a Then that Posted then waited
// behind that writer on the actor, which so never made the room.
func (h *HostActor) Post(c HostCompletion) {
	h.mu.RLock()
	if h.shut {
		h.mu.RUnlock()
		apply(c)
		return
	}
	h.posting.Add(1)
	h.mu.RUnlock()
	defer h.posting.Done()
	h.in <- c
}

// apply runs c's Then and completes it. A panicking Then completes the
// operation with an error wrapping ErrPanic instead of ending the
// process (the device actor recovers its callbacks too); a panicking
// Complete is dropped, so the actor goes on with the others.
func apply(c HostCompletion) {
	err := c.Err
	if c.Then != nil {
		if p := recovered(c.Then); p != nil {
			err = fmt.Errorf("%w: completion of host operation %d: %v", ErrPanic, c.Idx, p)
		}
	}
	if c.F != nil {
		recovered(func() { c.F.Complete(c.Idx, err) })
	}
}

// recovered runs fn and returns what it panicked with, if it did.
func recovered(fn func()) (p any) {
	defer func() { p = recover() }()
	fn()
	return nil
}

func (h *HostActor) run() {
	defer close(h.done)
	batch := make([]HostCompletion, 0, 64)
	for c := range h.in {
		batch = append(batch[:0], c)
	more:
		for len(batch) < cap(batch) {
			select {
			case c, ok := <-h.in:
				if !ok {
					break more
				}
				batch = append(batch, c)
			default:
				break more
			}
		}
		for _, c := range batch {
			apply(c)
		}
		clear(batch)
	}
}

// Close applies everything posted so far and stops the actor. Idempotent.
// A Then (or a Completer's Complete) must not call it: Close waits for the
// actor, which waits for the callback.
func (h *HostActor) Close() {
	h.once.Do(func() {
		h.mu.Lock()
		h.shut = true
		h.mu.Unlock()
		// The Posts under way send to the actor, which applies them
		// meanwhile; later ones apply their completion themselves.
		h.posting.Wait()
		close(h.in)
	})
	<-h.done
}
