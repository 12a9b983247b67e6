package hlsim

import (
	"flag"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// A fuzz target's input that hangs is a defect, which the fuzzer itself
// does not report. In a fuzzing worker (go test -fuzz) internal/fuzz gives
// each input fuzzWorkerLimit and then panics the worker ("deadlocked!",
// RunFuzzWorker); the coordinator discards the worker's output, so all it
// reports is "fuzzing process hung or terminated unexpectedly": the
// input, but no message and no stacks, and a panic of the target's own
// at a later time is never seen. So in a worker, watchHang reports the
// hang before that limit, as a failure of the input (with every
// goroutine's stack), then ends it (unblock: the device's Close ends
// every blocked call) so that the input returns and the failure reaches
// the coordinator; the harness's own waits stop at deadline.
//
// Outside a worker (the seed corpus run by go test, -race included, and
// a re-run of a saved input) the output is the test binary's own, and
// the watch panics after 2*safety with the input in the message.
const (
	fuzzWorkerLimit = 10 * time.Second // internal/fuzz RunFuzzWorker
	fuzzHangAfter   = 6 * time.Second  // leaves the unblock and the return time within the limit
)

// inFuzzWorker reports whether this process is a fuzzing worker: cmd/go
// starts workers with -test.fuzzworker (testing/fuzz.go).
func inFuzzWorker() bool {
	f := flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() == "true"
}

// hangWatch is the hang watch of one fuzz input.
type hangWatch struct {
	mu       sync.Mutex
	done     bool
	unblock  func()
	deadline time.Time // in a worker: when the watch fires (zero outside one)
	timer    *time.Timer
	fired    chan struct{} // closed when the timer's function has returned
}

// watchHang arms the hang watch of one input of target name; stop it
// (defer) when the input is done.
func watchHang(t *testing.T, name string, input []byte) *hangWatch {
	w := &hangWatch{fired: make(chan struct{})}
	if !inFuzzWorker() {
		w.timer = time.AfterFunc(2*safety, func() {
			defer close(w.fired)
			panic(fmt.Sprintf("%s: input %x hangs", name, input))
		})
		return w
	}
	w.deadline = time.Now().Add(fuzzHangAfter)
	w.timer = time.AfterFunc(fuzzHangAfter, func() {
		defer close(w.fired)
		w.mu.Lock()
		if w.done {
			w.mu.Unlock()
			return
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		// Under mu: stop, which the input's return runs first, waits
		// for this report, so it is made while the test still runs.
		t.Errorf("%s: input %x hangs: not done within %v (a fuzzing worker is killed after %v); goroutines:\n%s",
			name, input, fuzzHangAfter, fuzzWorkerLimit, buf)
		unblock := w.unblock
		w.mu.Unlock()
		if unblock != nil {
			unblock()
		}
	})
	return w
}

// setUnblock names what ends the input's blocked calls once it hangs.
func (w *hangWatch) setUnblock(f func()) {
	w.mu.Lock()
	w.unblock = f
	w.mu.Unlock()
}

// stop disarms the watch; if it fired, stop waits for its report and
// unblock to finish.
func (w *hangWatch) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
	if !w.timer.Stop() {
		<-w.fired
	}
}
