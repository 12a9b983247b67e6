package bench

import (
	"sync"
	"time"
)

// The harness's clock. Timing one operation of a few hundred nanoseconds
// with time.Now (about 60 ns here: wall and monotonic clocks) or even
// the monotonic clock alone (about 35 ns, a vDSO clock_gettime) would
// weigh on what is measured, so where the CPU has an invariant TSC the
// harness reads it directly (about 15 ns), as ucx_perftest does
// (ucs_get_time), and converts ticks to nanoseconds with a rate measured
// against the monotonic clock once per process.
type clock struct {
	tsc       bool
	base      time.Time
	nsPerTick float64
}

var (
	clkOnce sync.Once
	clk     clock
)

// harnessClock returns the calibrated clock.
func harnessClock() *clock {
	clkOnce.Do(func() {
		clk = clock{base: time.Now(), nsPerTick: 1}
		if haveTSC() {
			if r, ok := calibrateTSC(10 * time.Millisecond); ok {
				clk.tsc, clk.nsPerTick = true, r
			}
		}
	})
	return &clk
}

// calibrateTSC measures nanoseconds per TSC tick over about d.
func calibrateTSC(d time.Duration) (float64, bool) {
	read := func(base time.Time) (int64, time.Duration) {
		for {
			a := rdtsc()
			t := time.Since(base)
			b := rdtsc()
			if b-a < 20000 { // not preempted between the reads
				return a + (b-a)/2, t
			}
		}
	}
	base := time.Now()
	c0, t0 := read(base)
	for time.Since(base) < d {
	}
	c1, t1 := read(base)
	if c1 <= c0 || t1 <= t0 {
		return 0, false
	}
	r := float64(t1-t0) / float64(c1-c0)
	if r < 0.05 || r > 20 { // 50 MHz .. 20 GHz: anything else is not a usable TSC
		return 0, false
	}
	return r, true
}

// now reads the clock, in ticks.
func (c *clock) now() int64 {
	if c.tsc {
		return rdtsc()
	}
	return int64(time.Since(c.base))
}

// dur converts ticks to a duration.
func (c *clock) dur(ticks int64) time.Duration {
	if !c.tsc {
		return time.Duration(ticks)
	}
	return time.Duration(float64(ticks) * c.nsPerTick)
}

// ticks converts a duration to ticks.
func (c *clock) ticks(d time.Duration) int64 {
	if !c.tsc {
		return int64(d)
	}
	return int64(float64(d) / c.nsPerTick)
}

// Source names the clock for reports.
func (c *clock) source() string {
	if c.tsc {
		return "tsc"
	}
	return "monotonic"
}
