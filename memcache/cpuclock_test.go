package memcache

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time the calling thread has used, in
// nanoseconds.
func threadCPU(b *testing.B) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return ts.Nano()
}

// cpuTimer reports, besides the wall-clock ns/op, the CPU time the
// benchmark's thread spent per op ("cpu-ns/<unit>"): on a machine shared with
// other jobs, wall time also counts the time the thread waited for a core,
// CPU time does not (it still pays for the caches the other jobs evicted).
type cpuTimer struct {
	b     *testing.B
	start int64
}

// startCPU locks the benchmark goroutine to its thread and starts counting.
func startCPU(b *testing.B) *cpuTimer {
	runtime.LockOSThread()
	return &cpuTimer{b: b, start: threadCPU(b)}
}

// stop reports the CPU time per op under cpu-ns/unit, unlocks the thread
// and returns the time it reported.
func (t *cpuTimer) stop(unit string) float64 {
	d := threadCPU(t.b) - t.start
	runtime.UnlockOSThread()
	if t.b.N == 0 {
		return 0
	}
	per := float64(d) / float64(t.b.N)
	t.b.ReportMetric(per, "cpu-ns/"+unit)
	return per
}
