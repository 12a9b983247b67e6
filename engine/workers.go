package engine

// Workers behind env.Go, the data paths' tasks (a TCP Put's send, a peer
// request's copies). A task's goroutine that ends waits for the next task
// instead of exiting, up to maxIdleWorkers of them: a new goroutine starts
// on a small stack and grows it (copying it) on the first deep call, which
// a send through the wire and the socket is, at every task; a kept one has
// grown once. Measured on a TCP put_bw of 1 MiB (docs/compare-all.md,
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

// workers hands tasks to idle goroutines.
type workers struct {
	work    chan func()    // unbuffered: a send succeeds only into an idle worker
	stop    chan struct{}  // closed by Engine.Close before it waits for the tasks
	idle    atomic.Int32   // workers waiting on work
	live    sync.WaitGroup // workers, running a task or waiting (Close waits)
	started atomic.Int64   // goroutines started (tests)
}

// init makes the channels (in place: workers holds a WaitGroup).
func (w *workers) init() {
	w.work, w.stop = make(chan func()), make(chan struct{})
}

// Go runs fn on a goroutine that Engine.Close waits for: an idle
// worker's, else a new one's. e.async counts the tasks (a task's end is
// its Done, whether its worker then waits or ends), workers.live the
// workers.
func (e *env) Go(fn func()) {
	e.async.Add(1)
	select {
	case e.workers.work <- fn:
		return
	default:
	}
	e.workers.live.Add(1)
	e.workers.started.Add(1)
	go e.work(fn)
}

// work runs fn and then the tasks handed to it while it waits, until the
// engine closes or enough others wait.
func (e *env) work(fn func()) {
	w := &e.workers
	defer w.live.Done()
	for {
		fn()
		fn = nil // nothing of the task stays reachable while it waits
		e.async.Done()
		if w.stop == nil { // an Engine not made by New (tests)
			return
		}
		if w.idle.Add(1) > maxIdleWorkers {
			w.idle.Add(-1)
			return
		}
		select {
		case fn = <-w.work:
			w.idle.Add(-1)
		case <-w.stop:
			w.idle.Add(-1)
			return
		}
	}
}

// stopWorkers ends the idle workers and makes the others end after their
// task (Close, before it waits for the tasks and the workers; a task given
// later runs on a worker that ends after it).
func (e *Engine) stopWorkers() { close(e.workers.stop) }
