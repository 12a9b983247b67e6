// Package testutil holds helpers shared by gxfer's tests: a TestMain that
// checks for leaked goroutines and file descriptors, and fd counting.
package testutil

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// OpenFDs lists this process's open descriptors as "fd -> target".
func OpenFDs() map[string]string {
	out := map[string]string{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return out
	}
	for _, e := range ents {
		t, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the ReadDir fd itself, closed by now
		}
		out[e.Name()] = t
	}
	return out
}

// LeakedFDs returns descriptors open now that were not open in before.
func LeakedFDs(before map[string]string) []string {
	var leaked []string
	for k, v := range OpenFDs() {
		if bv, ok := before[k]; !ok || bv != v {
			leaked = append(leaked, k+" -> "+v)
		}
	}
	sort.Strings(leaked)
	return leaked
}

// Main is the body of every package's TestMain: it runs the tests, then
// fails the binary if goroutines or file descriptors leaked.
func Main(m *testing.M) {
	// Initialise the runtime's network poller first so its epoll and eventfd
	// descriptors are part of the baseline.
	if r, w, err := os.Pipe(); err == nil {
		_ = r.Close()
		_ = w.Close()
	}
	ignore := goleak.IgnoreCurrent()
	before := OpenFDs()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(ignore); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	if code == 0 {
		if l := LeakedFDs(before); len(l) > 0 {
			fmt.Fprintln(os.Stderr, "leaked file descriptors:\n  "+strings.Join(l, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}

// Stacks is every goroutine's stack (runtime.Stack with all set), the
// buffer grown until they fit: for tests that look for goroutines parked
// in a function.
func Stacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
