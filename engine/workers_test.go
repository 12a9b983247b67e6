package engine

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

// waitIdle waits until n workers wait for a task.
func waitIdle(t *testing.T, e *Engine, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return e.workers.idleCount() == n }, 5*time.Second, time.Millisecond)
}

// TestWorkersReuse: tasks given one after the other run on one goroutine
// (a worker that ended a task takes the next), each on a stack it grew
// once; an idle worker is not a task (e.async); Close waits for a task
// that runs and then ends the idle workers.
func TestWorkersReuse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tasks int
	}{{"one", 1}, {"sequential", 50}} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(Config{Devices: DevicesNone})
			require.NoError(t, err)
			ran := 0
			for range tc.tasks {
				done := make(chan struct{})
				e.env().Go(func() { ran++; close(done) })
				<-done
				waitIdle(t, e, 1)
			}
			require.Equal(t, tc.tasks, ran)
			require.EqualValues(t, 1, e.workers.started.Load(), "one goroutine ran every task")
			// e.async counts tasks, not the worker that waits for one:
			// tests wait on it for a request's goroutine to end.
			waited := make(chan struct{})
			go func() { e.async.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(5 * time.Second):
				t.Fatal("e.async.Wait blocked by an idle worker")
			}
			release := make(chan struct{})
			var ended bool
			e.env().Go(func() { <-release; ended = true })
			go func() { time.Sleep(50 * time.Millisecond); close(release) }()
			require.NoError(t, e.Close())
			require.True(t, ended, "Close waited for the running task")
			// A worker's goroutine returns just after Close saw it end
			// (its deferred Done wakes Close first): it is gone soon after.
			waitNoWorkers(t, "no worker left after Close")
		})
	}
}

// TestWorkersBound: a burst of concurrent tasks leaves at most
// maxIdleWorkers goroutines waiting; the rest end.
func TestWorkersBound(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	const n = maxIdleWorkers + 8
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Add(n)
	for range n {
		e.env().Go(func() { wg.Done(); <-release })
	}
	wg.Wait()
	require.EqualValues(t, n, e.workers.started.Load())
	close(release)
	waitIdle(t, e, maxIdleWorkers)
	require.Eventually(t, func() bool { return workerGoroutines() == maxIdleWorkers }, 5*time.Second, time.Millisecond)
}

// TestWorkersAfterClose: a task given after Close runs on a goroutine of
// its own, which ends after it.
func TestWorkersAfterClose(t *testing.T) {
	e, err := New(Config{Devices: DevicesNone})
	require.NoError(t, err)
	require.NoError(t, e.Close())
	waitNoWorkers(t, "no worker left after Close")
	done := make(chan struct{})
	e.env().Go(func() { close(done) })
	<-done
	waitNoWorkers(t, "the task's goroutine ended")
}

// waitNoWorkers waits until no goroutine is in env.work: one that ended
// its last task returns just after it told Close (or its task's giver)
// so, and a count taken at once may still see it (CI, a loaded machine).
func waitNoWorkers(t *testing.T, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return workerGoroutines() == 0 }, 5*time.Second, time.Millisecond, msg)
}

// workerGoroutines counts the goroutines in env.work.
func workerGoroutines() int {
	return strings.Count(testutil.Stacks(), "engine.(*env).work(")
}

// TestWorkersStopRace: tasks given while Close ends the idle workers
// (stopWorkers) each run once: a worker Go took off the idle list is never
// one that stopWorkers ends, and no task is sent to an ended one. Then no
// worker is left.
func TestWorkersStopRace(t *testing.T) {
	for round := range 20 {
		e, err := New(Config{Devices: DevicesNone})
		require.NoError(t, err)
		// Workers idle first, for stopWorkers to end while tasks come.
		var warm sync.WaitGroup
		warm.Add(maxIdleWorkers)
		for range maxIdleWorkers {
			e.env().Go(func() { warm.Done(); warm.Wait() })
		}
		waitIdle(t, e, maxIdleWorkers)
		const givers, each = 4, 50
		var count atomic.Int64
		var ran, gave sync.WaitGroup
		ran.Add(givers * each)
		gave.Add(givers)
		for range givers {
			go func() {
				defer gave.Done()
				for range each {
					e.env().Go(func() { count.Add(1); ran.Done() })
				}
			}()
		}
		e.stopWorkers()
		gave.Wait()
		ran.Wait()
		require.EqualValues(t, givers*each, count.Load(), "round %d", round)
		require.Zero(t, e.workers.idleCount(), "round %d: a worker went idle after stopWorkers", round)
		require.NoError(t, e.Close())
		waitNoWorkers(t, fmt.Sprintf("round %d", round))
	}
}
