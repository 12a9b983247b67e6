// Package queue provides the bounded multi-producer submission queues of the
// engine: one per (device, direction). A full queue either makes the
// submitter wait (up to its context's deadline) or fails at once with
// ErrFull; nothing grows without bound.
//
// Consumers drain a queue in batches (PopBatch), which is how the engine
// coalesces many queued copies into one command submission.
package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// ErrFull is returned by Push in FailFast mode when the queue is full.
var ErrFull = errors.New("queue: full")

// ErrClosed is returned by Push after Close.
var ErrClosed = errors.New("queue: closed")

// ErrInvalid is returned by Push for a nil context. It also matches
// os.ErrInvalid.
var ErrInvalid = fmt.Errorf("queue: %w", os.ErrInvalid)

// Mode says what Push does when the queue is full.
type Mode uint8

const (
	// Wait blocks until there is room or the context ends.
	Wait Mode = iota
	// FailFast returns ErrFull at once.
	FailFast
)

// Queue is a bounded MPMC FIFO of T. The zero value is not usable; use New.
type Queue[T any] struct {
	ch     chan T
	mode   Mode
	closed chan struct{}
	// once closes closed; a concurrent Close waits in it until that is
	// done (with a flag, the loser could pass the barrier and return
	// before the winner closed the channel, and a push after that
	// Close returned would succeed).
	once sync.Once
	// gate: pushes hold it shared while they send; Close takes it
	// exclusively after closing, so no push lands after Close returns.
	gate sync.RWMutex

	pushed   atomic.Uint64
	fullHits atomic.Uint64
}

// MaxCapacity bounds a queue's capacity. The channel behind a queue is
// allocated whole by New (8 MiB at this bound for pointer items), so a
// larger capacity costs memory up front, and a capacity of 1<<40 ended
// the process in make ("fatal error: runtime: out of memory", which no
// recover catches). A deeper queue is never useful either: a queue feeds
// one consumer that drains it in batches, and a million queued
// submissions are already seconds of work for a device (a DMA copy
// takes microseconds at the least): more only delays the submitters'
// backpressure and keeps more buffers referenced.
const MaxCapacity = 1 << 20

// New returns a queue holding at most capacity items; capacity is
// clamped into [1, MaxCapacity] (callers taking it from users validate
// it first: see engine.Config.QueueDepth).
func New[T any](capacity int, mode Mode) *Queue[T] {
	capacity = min(max(capacity, 1), MaxCapacity)
	return &Queue[T]{ch: make(chan T, capacity), mode: mode, closed: make(chan struct{})}
}

// Push appends v. When the queue is full it waits for room until ctx ends
// (Wait mode, returning ctx.Err()) or fails with ErrFull (FailFast mode).
// After Close it returns ErrClosed. A nil ctx is refused with ErrInvalid
// in every mode, full or not: accepted while there is room, it would
// panic only once the queue fills, under load. Safe for concurrent use.
func (q *Queue[T]) Push(ctx context.Context, v T) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalid)
	}
	q.gate.RLock()
	defer q.gate.RUnlock()
	select {
	case <-q.closed:
		return ErrClosed
	default:
	}
	select {
	case q.ch <- v:
		q.pushed.Add(1)
		return nil
	default:
	}
	q.fullHits.Add(1)
	if q.mode == FailFast {
		return ErrFull
	}
	select {
	case q.ch <- v:
		q.pushed.Add(1)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-q.closed:
		return ErrClosed
	}
}

// TryPush appends v without waiting; it reports whether it did.
func (q *Queue[T]) TryPush(v T) bool {
	q.gate.RLock()
	defer q.gate.RUnlock()
	select {
	case <-q.closed:
		return false
	default:
	}
	select {
	case q.ch <- v:
		q.pushed.Add(1)
		return true
	default:
		q.fullHits.Add(1)
		return false
	}
}

// PopBatch moves up to len(buf) queued items into buf without waiting and
// returns how many it moved.
func (q *Queue[T]) PopBatch(buf []T) int {
	n := 0
	for n < len(buf) {
		select {
		case v := <-q.ch:
			buf[n] = v
			n++
		default:
			return n
		}
	}
	return n
}

// Chan exposes the receive side for consumers that block on new work.
func (q *Queue[T]) Chan() <-chan T { return q.ch }

// Len is the number of queued items.
func (q *Queue[T]) Len() int { return len(q.ch) }

// Cap is the capacity.
func (q *Queue[T]) Cap() int { return cap(q.ch) }

// Close makes later pushes fail with ErrClosed and wakes waiting pushers.
// When it returns, no push is in progress and none will succeed, so a
// consumer's final drain sees every accepted item. Queued items stay for
// the consumer to drain. Idempotent.
func (q *Queue[T]) Close() {
	q.once.Do(func() { close(q.closed) })
	q.gate.Lock()
	q.gate.Unlock() //nolint:staticcheck // a barrier: waits for pushes in progress
}

// Closed reports whether Close was called.
func (q *Queue[T]) Closed() bool {
	select {
	case <-q.closed:
		return true
	default:
		return false
	}
}

// Stats are the queue's counters.
type Stats struct {
	Pushed   uint64 // items accepted
	FullHits uint64 // pushes that found the queue full
	Len, Cap int
}

// Stats returns the counters.
func (q *Queue[T]) Stats() Stats {
	return Stats{Pushed: q.pushed.Load(), FullHits: q.fullHits.Load(), Len: len(q.ch), Cap: cap(q.ch)}
}
