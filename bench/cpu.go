package bench

import (
	"time"

	"golang.org/x/sys/unix"
)

// CPUUse is this process's CPU time over a measured run: every thread's,
// the engine's goroutines included, from getrusage. Where a core is full
// (a TCP sender's, whose kernel work is the copy into the socket), it
// says what the rest of an operation costs beside the system calls.
type CPUUse struct {
	// UserUs and SysUs are user and system CPU time per iteration (one
	// put, copy or round trip, as Result.Iterations counts), in
	// microseconds.
	UserUs float64 `json:"user_us"`
	SysUs  float64 `json:"sys_us"`
	// Cores is user plus system time over the run's wall time: 1 is one
	// core busy all along.
	Cores float64 `json:"cores"`
}

// cpuTimes are a process's user and system CPU time.
type cpuTimes struct{ user, sys time.Duration }

// processCPU reads this process's CPU time; ok is false when getrusage
// fails.
func processCPU() (cpuTimes, bool) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return cpuTimes{}, false
	}
	return cpuTimes{user: time.Duration(ru.Utime.Nano()), sys: time.Duration(ru.Stime.Nano())}, true
}

// cpuUse is the CPU time between from and to spread over iters
// iterations and wall time; nil when there is nothing to spread it over.
func cpuUse(from, to cpuTimes, iters int64, wall time.Duration) *CPUUse {
	if iters <= 0 || wall <= 0 {
		return nil
	}
	user, sys := to.user-from.user, to.sys-from.sys
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(iters) }
	return &CPUUse{UserUs: us(user), SysUs: us(sys), Cores: float64(user+sys) / float64(wall)}
}

// CPUStamp is this process's CPU time at one moment (StartCPU), for
// programs beside gxfer perf that report their CPU use as it does
// (bench/tcpfloor).
type CPUStamp struct {
	t  cpuTimes
	ok bool
}

// StartCPU reads this process's CPU time now.
func StartCPU() CPUStamp {
	t, ok := processCPU()
	return CPUStamp{t: t, ok: ok}
}

// Use is the CPU time since s spread over iters iterations and wall time,
// as Result.CPU; nil when getrusage failed or there is nothing to spread
// it over.
func (s CPUStamp) Use(iters int64, wall time.Duration) *CPUUse {
	t, ok := processCPU()
	if !ok || !s.ok {
		return nil
	}
	return cpuUse(s.t, t, iters, wall)
}
