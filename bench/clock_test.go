package bench

import (
	"context"
	"errors"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

func TestParseClockMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ClockMode
		err  bool
	}{
		{"auto", ClockAuto, false},
		{"tsc", ClockTSC, false},
		{"monotonic", ClockMonotonic, false},
		{"", ClockAuto, true},
		{"TSC", ClockAuto, true},
		{"rdtsc", ClockAuto, true},
		{"mono", ClockAuto, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			m, err := ParseClockMode(tc.in)
			if tc.err {
				require.ErrorContains(t, err, "want auto, tsc or monotonic")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, m)
			require.Equal(t, tc.in, m.String(), "String parses back")
		})
	}
}

func TestParseTSCFlags(t *testing.T) {
	for _, tc := range []struct {
		name, cpuinfo string
		want          tscFlags
	}{
		{"invariant", "processor\t: 0\nflags\t\t: fpu tsc msr constant_tsc nonstop_tsc rdtscp\n", tscFlags{true, true, true}},
		{"tcg", "processor\t: 0\nflags\t\t: fpu de pse tsc msr pae\n", tscFlags{present: true}},
		{"constant only", "flags\t\t: tsc constant_tsc\n", tscFlags{present: true, constant: true}},
		{"last flag", "flags\t\t: fpu tsc\n", tscFlags{present: true}},
		{"rdtscp is not tsc", "flags\t\t: fpu rdtscp tsc_deadline_timer\n", tscFlags{}},
		{"no flags line", "processor\t: 0\n", tscFlags{}},
		{"first cpu only", "flags\t: fpu\n\nflags\t: tsc constant_tsc nonstop_tsc\n", tscFlags{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := parseTSCFlags(tc.cpuinfo)
			require.Equal(t, tc.want, f)
			require.Equal(t, tc.want.constant && tc.want.nonstop, f.invariant())
		})
	}
}

func TestCalibrateTwice(t *testing.T) {
	boom := errors.New("the TSC did not advance")
	for _, tc := range []struct {
		name  string
		rates []float64 // ns per tick, one per calibration
		errs  []error
		want  string // error substring, "" for success
	}{
		{"equal", []float64{0.5, 0.5}, nil, ""},
		{"0.9% apart", []float64{0.5, 0.5045}, nil, ""},
		{"2% apart", []float64{0.5, 0.51}, nil, "not steady"},
		{"halved", []float64{0.5, 0.25}, nil, "not steady"},
		{"first fails", []float64{0, 0.5}, []error{boom, nil}, "calibration against the monotonic clock failed: the TSC did not advance"},
		{"second fails", []float64{0.5, 0}, []error{nil, boom}, "did not advance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []time.Duration
			c, err := calibrateTwice(func(d time.Duration) (float64, error) {
				i := len(calls)
				calls = append(calls, d)
				if tc.errs != nil && tc.errs[i] != nil {
					return 0, tc.errs[i]
				}
				return tc.rates[i], nil
			}, tscCalibration)
			if tc.want != "" {
				require.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, []time.Duration{tscCalibration, tscCalibration}, calls)
			require.True(t, c.tsc)
			require.InDelta(t, (tc.rates[0]+tc.rates[1])/2, c.nsPerTick, 1e-12)
			require.Equal(t, "tsc (forced)", c.source())
		})
	}
}

// checkClock times a sleep with c against time.Since.
func checkClock(t *testing.T, c *clock) {
	t.Helper()
	w0, t0 := time.Now(), c.now()
	time.Sleep(20 * time.Millisecond)
	d, wall := c.dur(c.now()-t0), time.Since(w0)
	require.InDelta(t, float64(wall), float64(d), float64(wall)/100+float64(100*time.Microsecond), "clock %v, wall %v (%s)", d, wall, c.source())
	require.InDelta(t, float64(time.Second), float64(c.dur(c.ticks(time.Second))), 1e3)
}

func TestClockModes(t *testing.T) {
	flags, flagsErr := cpuTSCFlags()
	for _, tc := range []struct {
		mode ClockMode
		// check checks the clock or the error mode gave.
		check func(t *testing.T, c *clock, err error)
	}{
		{ClockMonotonic, func(t *testing.T, c *clock, err error) {
			require.NoError(t, err)
			require.False(t, c.tsc, "monotonic never uses the TSC")
			require.Equal(t, "monotonic", c.source())
			require.Equal(t, time.Duration(12345), c.dur(12345))
		}},
		{ClockAuto, func(t *testing.T, c *clock, err error) {
			require.NoError(t, err)
			require.False(t, c.forced)
			if c.tsc {
				require.True(t, haveTSC(), "auto uses the TSC only where it is invariant")
				require.Equal(t, "tsc", c.source())
			} else {
				require.Equal(t, "monotonic", c.source())
			}
			require.Same(t, c, harnessClock())
		}},
		{ClockTSC, func(t *testing.T, c *clock, err error) {
			switch {
			case runtime.GOARCH != "amd64":
				require.ErrorContains(t, err, "no TSC on "+runtime.GOARCH)
				return
			case flagsErr != nil:
				require.ErrorContains(t, err, "cannot tell whether the CPU has a TSC")
				return
			case !flags.present:
				require.ErrorContains(t, err, "no tsc flag")
				return
			case !flags.invariant() && err != nil:
				// Not invariant: the calibration may refuse it.
				require.ErrorContains(t, err, "TSC")
				return
			}
			// An invariant TSC calibrates steadily (on a quiet host).
			require.NoError(t, err)
			require.True(t, c.tsc)
			require.True(t, c.forced)
			require.Equal(t, "tsc (forced)", c.source())
			require.GreaterOrEqual(t, c.nsPerTick, 0.05)
			require.LessOrEqual(t, c.nsPerTick, 20.0)
		}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			c, err := clockFor(tc.mode)
			tc.check(t, c, err)
			if err == nil {
				checkClock(t, c)
			}
			// Cached: the same clock or error again.
			c2, err2 := clockFor(tc.mode)
			require.Same(t, c, c2)
			require.Equal(t, err, err2)
			src, err3 := ClockSource(tc.mode)
			require.Equal(t, err, err3)
			if err == nil {
				require.Equal(t, c.source(), src)
			}
		})
	}
	_, err := clockFor("rdtsc")
	require.ErrorContains(t, err, "unknown clock mode")
}

func TestClockForConcurrent(t *testing.T) {
	modes := []ClockMode{ClockAuto, ClockTSC, ClockMonotonic}
	type got struct {
		c   *clock
		err error
	}
	results := make(chan got, 8*len(modes))
	for range 8 {
		for _, m := range modes {
			go func() {
				c, err := clockFor(m)
				results <- got{c, err}
			}()
		}
	}
	seen := map[*clock]int{}
	for range 8 * len(modes) {
		r := <-results
		if r.err == nil {
			seen[r.c]++
		}
	}
	for c, n := range seen {
		require.Equal(t, 8, n, "one clock per mode (%s)", c.source())
	}
}

func TestReportClock(t *testing.T) {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	env := &Env{Engine: eng}
	tests, err := TestsFor(env, "h2h")
	require.NoError(t, err)
	for _, tc := range []struct {
		mode ClockMode
		want string // Env.Clock; "" for the mode's own source
	}{
		{ClockMonotonic, "monotonic"},
		{ClockAuto, ""},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			want := tc.want
			if want == "" {
				want = harnessClock().source()
			}
			rep, err := Run(context.Background(), env, tests, Params{Sizes: []int{8}, Iterations: 20, Clock: tc.mode})
			require.NoError(t, err)
			require.Equal(t, want, rep.Env.Clock)
			require.Len(t, rep.Results, 1)
			require.Positive(t, rep.Results[0].Latency.Median)
		})
	}
	_, err = NewReport(env, tests, Params{Sizes: []int{8}, Clock: "hpet"})
	require.ErrorContains(t, err, "unknown clock mode")
}

// TestExportedClock: the exported Clock ticks forward, converts ticks to a
// duration that matches the monotonic clock's, and refuses an unknown mode.
func TestExportedClock(t *testing.T) {
	for _, m := range []ClockMode{ClockAuto, ClockMonotonic} {
		t.Run(m.String(), func(t *testing.T) {
			c, err := NewClock(m)
			require.NoError(t, err)
			require.NotEmpty(t, c.Source())
			t0, w0 := c.Now(), time.Now()
			time.Sleep(20 * time.Millisecond)
			d, w := c.Duration(c.Now()-t0), time.Since(w0)
			require.Greater(t, d, 15*time.Millisecond)
			require.InDelta(t, float64(w), float64(d), float64(w)/10, "clock %s: %v against %v", c.Source(), d, w)
		})
	}
	_, err := NewClock("rdtsc")
	require.Error(t, err)
}

// TestClockTicksSaturate: a duration whose tick count does not fit an
// int64 (a -time of centuries on a TSC faster than 1 GHz) converts to the
// largest count, not to a wrapped negative one that would end a timed
// measurement after its first message.
func TestClockTicksSaturate(t *testing.T) {
	tsc := &clock{tsc: true, nsPerTick: 0.4} // 2.5 GHz
	mono := &clock{nsPerTick: 1}
	for _, tc := range []struct {
		name string
		c    *clock
		d    time.Duration
		want int64
	}{
		{"tsc 1s", tsc, time.Second, 2_500_000_000},
		{"tsc 2000000h", tsc, 2_000_000 * time.Hour, math.MaxInt64},
		{"tsc max", tsc, math.MaxInt64, math.MaxInt64},
		{"monotonic max", mono, math.MaxInt64, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.c.ticks(tc.d))
		})
	}
}
