package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The harness's clock. Timing one operation of a few hundred nanoseconds
// with time.Now (about 60 ns here: wall and monotonic clocks) or even
// the monotonic clock alone (about 35 ns, a vDSO clock_gettime) would
// weigh on what is measured, so where the CPU has an invariant TSC the
// harness reads it directly (about 15 ns), as ucx_perftest does
// (ucs_get_time), and converts ticks to nanoseconds with a rate measured
// against the monotonic clock once per process. Where the kernel's
// clocksource is slow (a QEMU TCG guest on the HPET: 3.6 us a read), the
// TSC can be forced (ClockTSC), as perftest always uses it (get_cycles).
type clock struct {
	tsc       bool
	forced    bool // ClockTSC: the TSC because it was asked for
	base      time.Time
	nsPerTick float64
}

// ClockMode selects what the harness times operations with.
type ClockMode string

const (
	// ClockAuto, the zero value: the TSC where it is invariant
	// (constant_tsc and nonstop_tsc in /proc/cpuinfo) and calibrates,
	// else the monotonic clock.
	ClockAuto ClockMode = ""
	// ClockTSC: the TSC even without the invariant flags, as perftest
	// times with it. It must calibrate against the monotonic clock twice
	// (2 x 10 ms) with rates within 1% of each other; without a usable
	// TSC (not amd64, no tsc flag, rdtsc disabled) it is an error. A TSC
	// that is not invariant may also differ between CPUs: pin the
	// process (taskset) where that matters.
	ClockTSC ClockMode = "tsc"
	// ClockMonotonic: the monotonic clock (time.Since), never the TSC.
	ClockMonotonic ClockMode = "monotonic"
)

// ParseClockMode parses auto, tsc or monotonic.
func ParseClockMode(s string) (ClockMode, error) {
	switch s {
	case "auto":
		return ClockAuto, nil
	case string(ClockTSC), string(ClockMonotonic):
		return ClockMode(s), nil
	}
	return ClockAuto, fmt.Errorf("unknown clock %q (want auto, tsc or monotonic)", s)
}

// String is the mode's name for ParseClockMode: auto, tsc or monotonic.
func (m ClockMode) String() string {
	if m == ClockAuto {
		return "auto"
	}
	return string(m)
}

// ClockSource prepares the clock that mode m selects (calibrated once per
// process and mode) and names it as reports do: "tsc", "tsc (forced)" or
// "monotonic". The error says why m cannot be used.
func ClockSource(m ClockMode) (string, error) {
	c, err := clockFor(m)
	if err != nil {
		return "", err
	}
	return c.source(), nil
}

// lazyClock is one clock, made on first use.
type lazyClock struct {
	once sync.Once
	c    clock
	err  error
}

func (l *lazyClock) get(mk func() (clock, error)) (*clock, error) {
	l.once.Do(func() { l.c, l.err = mk() })
	if l.err != nil {
		return nil, l.err
	}
	return &l.c, nil
}

// The harness's clocks, one per mode, each calibrated once per process.
var clocks struct{ auto, tsc, monotonic lazyClock }

// clockFor returns the calibrated clock of mode m.
func clockFor(m ClockMode) (*clock, error) {
	switch m {
	case ClockAuto:
		return clocks.auto.get(autoClock)
	case ClockTSC:
		return clocks.tsc.get(forcedTSC)
	case ClockMonotonic:
		return clocks.monotonic.get(func() (clock, error) { return monotonicClock(), nil })
	}
	return nil, fmt.Errorf("unknown clock mode %q (want auto, tsc or monotonic)", string(m))
}

// harnessClock returns the clock of ClockAuto, which is always usable.
func harnessClock() *clock {
	c, _ := clockFor(ClockAuto)
	return c
}

func monotonicClock() clock { return clock{base: time.Now(), nsPerTick: 1} }

// autoClock is the TSC where it is invariant and calibrates, else the
// monotonic clock.
func autoClock() (clock, error) {
	c := monotonicClock()
	if haveTSC() {
		if r, err := calibrateTSC(tscCalibration); err == nil {
			c.tsc, c.nsPerTick = true, r
		}
	}
	return c, nil
}

// tscCalibration is how long one calibration of the TSC lasts.
const tscCalibration = 10 * time.Millisecond

// forcedTSC is the TSC whether or not it is invariant, if there is one
// and it calibrates steadily.
func forcedTSC() (clock, error) {
	if err := tscUsable(); err != nil {
		return clock{}, err
	}
	return calibrateTwice(calibrateTSC, tscCalibration)
}

// calibrateTwice calibrates twice for d each and refuses rates more than
// 1% apart (a TSC whose rate changes: frequency scaling, or a counter
// that differs between the CPUs the thread ran on); the clock ticks at
// their mean.
func calibrateTwice(calibrate func(time.Duration) (float64, error), d time.Duration) (clock, error) {
	var r [2]float64
	for i := range r {
		var err error
		if r[i], err = calibrate(d); err != nil {
			return clock{}, fmt.Errorf("TSC calibration against the monotonic clock failed: %w", err)
		}
	}
	if diff := math.Abs(r[0]-r[1]) / min(r[0], r[1]); diff > 0.01 {
		return clock{}, fmt.Errorf("the TSC rate is not steady: two %v calibrations against the monotonic clock gave %.4f and %.4f GHz (%.2f%% apart, at most 1%% allowed)",
			d, 1/r[0], 1/r[1], 100*diff)
	}
	c := monotonicClock()
	c.tsc, c.forced, c.nsPerTick = true, true, (r[0]+r[1])/2
	return c, nil
}

// tscUsable says why the TSC cannot be read, if it cannot.
func tscUsable() error {
	if !tscArch {
		return fmt.Errorf("no TSC on %s (the TSC is read with rdtsc, amd64 only)", runtime.GOARCH)
	}
	f, err := cpuTSCFlags()
	if err != nil {
		return fmt.Errorf("cannot tell whether the CPU has a TSC: %w", err)
	}
	if !f.present {
		return errors.New("the CPU has no TSC (no tsc flag in /proc/cpuinfo)")
	}
	if !rdtscAllowed() {
		return errors.New("rdtsc is disabled for this process (prctl PR_SET_TSC)")
	}
	return nil
}

// haveTSC reports whether the TSC can be read and ticks at a constant rate
// in every power state (constant_tsc and nonstop_tsc), so that it can time
// operations.
func haveTSC() bool {
	if !tscArch {
		return false
	}
	f, err := cpuTSCFlags()
	return err == nil && f.present && f.invariant() && rdtscAllowed()
}

// tscFlags are the TSC flags of /proc/cpuinfo.
type tscFlags struct {
	present, constant, nonstop bool // tsc, constant_tsc, nonstop_tsc
}

func (f tscFlags) invariant() bool { return f.constant && f.nonstop }

func cpuTSCFlags() (tscFlags, error) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return tscFlags{}, err
	}
	return parseTSCFlags(string(b)), nil
}

// parseTSCFlags reads the first flags line of a /proc/cpuinfo.
func parseTSCFlags(cpuinfo string) tscFlags {
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			f := " " + v + " "
			return tscFlags{
				present:  strings.Contains(f, " tsc "),
				constant: strings.Contains(f, " constant_tsc "),
				nonstop:  strings.Contains(f, " nonstop_tsc "),
			}
		}
	}
	return tscFlags{}
}

// rdtscAllowed reports whether this process may execute rdtsc (prctl
// PR_SET_TSC can make it fault instead).
func rdtscAllowed() bool {
	var v int32
	// syscall.Syscall6 itself, so that &v stays valid during the call.
	if _, _, e := syscall.Syscall6(syscall.SYS_PRCTL, unix.PR_GET_TSC, uintptr(unsafe.Pointer(&v)), 0, 0, 0, 0); e != 0 {
		return true // not supported by this architecture's kernel: nothing disables it
	}
	return v == unix.PR_TSC_ENABLE
}

// calibrateTSC measures nanoseconds per TSC tick over about d.
func calibrateTSC(d time.Duration) (float64, error) {
	// read pairs a TSC value with a monotonic time: the middle of the
	// narrowest of up to 100 bracketing rdtsc pairs (a wide one was
	// preempted between its reads, or the clock read is slow).
	read := func(base time.Time) (int64, time.Duration, bool) {
		var c int64
		var t time.Duration
		width := int64(-1)
		for range 100 {
			a := rdtsc()
			s := time.Since(base)
			b := rdtsc()
			if w := b - a; w >= 0 && (width < 0 || w < width) {
				c, t, width = a+w/2, s, w
			}
			if width >= 0 && width < 20000 { // not preempted between the reads
				break
			}
		}
		return c, t, width >= 0
	}
	base := time.Now()
	c0, t0, ok0 := read(base)
	for time.Since(base) < d {
	}
	c1, t1, ok1 := read(base)
	if !ok0 || !ok1 || c1 <= c0 || t1 <= t0 {
		return 0, errors.New("the TSC did not advance")
	}
	r := float64(t1-t0) / float64(c1-c0)
	if r < 0.05 || r > 20 { // 50 MHz .. 20 GHz: anything else is not a usable TSC
		return 0, fmt.Errorf("it ticks at %.4g GHz, outside 0.05..20 GHz", 1/r)
	}
	return r, nil
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

// ticks converts a duration to ticks, at most math.MaxInt64.
func (c *clock) ticks(d time.Duration) int64 {
	if !c.tsc {
		return int64(d)
	}
	t := float64(d) / c.nsPerTick
	if t >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(t)
}

// Source names the clock for reports: "tsc" (chosen by ClockAuto),
// "tsc (forced)" (ClockTSC) or "monotonic".
func (c *clock) source() string {
	switch {
	case c.tsc && c.forced:
		return "tsc (forced)"
	case c.tsc:
		return "tsc"
	}
	return "monotonic"
}

// Clock is the harness's clock for other measuring programs
// (bench/rdmafloor times its rounds with it, as gxfer perf does).
type Clock struct{ c *clock }

// NewClock prepares the clock of mode m (see ClockSource).
func NewClock(m ClockMode) (Clock, error) {
	c, err := clockFor(m)
	if err != nil {
		return Clock{}, err
	}
	return Clock{c}, nil
}

// Now reads the clock, in ticks (TSC cycles, or nanoseconds).
func (c Clock) Now() int64 { return c.c.now() }

// Duration converts ticks to a duration.
func (c Clock) Duration(ticks int64) time.Duration { return c.c.dur(ticks) }

// Source names the clock as reports do: "tsc", "tsc (forced)" or "monotonic".
func (c Clock) Source() string { return c.c.source() }
