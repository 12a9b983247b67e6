package engine

// Workers behind env.Go, the data paths' tasks (a TCP Put's send, a peer
// request's copies). A task's goroutine that ends waits for the next task
// instead of exiting, up to maxIdleWorkers of them: a new goroutine starts
// on a small stack and grows it (copying it) on the first deep call, which
// a send through the wire and the socket is, at every task; a kept one has
// grown once. Measured on a TCP put_bw of 1 MiB (docs/compare-history-36-40.md,
// session 37): the sender's user CPU per put 31.1 against 36.9 us, the
// paired median of 16 alternations 5.2 us less.

import (
	"sync"
	"sync/atomic"
)

// maxIdleWorkers bounds the goroutines kept waiting for a task: a burst of
// concurrent tasks leaves at most this many behind, each a parked
// goroutine and its stack.
const maxIdleWorkers = 16

// workers hands tasks to idle goroutines. An idle worker waits in a plain
// receive on a channel of its own, and the last one to go idle is the
// next one given a task (its stack and what it touched are the warmest):
// a hand-off is a mutex and a send to a parked receiver, with none of the
// work of a select over a shared channel and a stop channel, which a
// woken worker had to take both channels' locks for (session 38: the
// select was 4% of a TCP put's user time).
type workers struct {
	mu      sync.Mutex
	idle    []*worker      // waiting for a task, the most recent last
	kept    bool           // workers wait for tasks (set by init; an Engine not made by New has none)
	stopped bool           // Engine.Close began: no worker waits any more
	live    sync.WaitGroup // workers, running a task or waiting (Close waits)
	started atomic.Int64   // goroutines started (tests)
}

// worker is an idle goroutine's hand-off point: one task at most is ever
// sent (by Go, which took the worker off idle), so the send never blocks;
// closed by stopWorkers.
type worker struct{ task chan func() }

// init makes the workers keep their goroutines.
func (w *workers) init() { w.kept = true }

// idleCount is the number of workers waiting for a task (tests).
func (w *workers) idleCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}

// Go runs fn on a goroutine that Engine.Close waits for: an idle
// worker's, else a new one's. e.async counts the tasks (a task's end is
// its Done, whether its worker then waits or ends), workers.live the
// workers.
func (e *env) Go(fn func()) {
	e.async.Add(1)
	w := &e.workers
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		k := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		k.task <- fn
		return
	}
	w.mu.Unlock()
	w.live.Add(1)
	w.started.Add(1)
	go e.work(fn)
}

// work runs fn and then the tasks handed to it while it waits, until the
// engine closes or enough others wait.
func (e *env) work(fn func()) {
	w := &e.workers
	defer w.live.Done()
	var k *worker
	for {
		fn()
		fn = nil // nothing of the task stays reachable while it waits
		e.async.Done()
		w.mu.Lock()
		if !w.kept || w.stopped || len(w.idle) >= maxIdleWorkers {
			w.mu.Unlock()
			return
		}
		if k == nil {
			k = &worker{task: make(chan func(), 1)}
		}
		w.idle = append(w.idle, k)
		w.mu.Unlock()
		var ok bool
		if fn, ok = <-k.task; !ok {
			return
		}
	}
}

// stopWorkers ends the idle workers and makes the others end after their
// task (Close, before it waits for the tasks and the workers; a task given
// later runs on a goroutine that ends after it).
func (e *Engine) stopWorkers() {
	w := &e.workers
	w.mu.Lock()
	w.stopped = true
	for _, k := range w.idle {
		close(k.task)
	}
	w.idle = nil
	w.mu.Unlock()
}
