package bench

import (
	"os"
	"strings"
)

// rdtsc reads the time-stamp counter.
func rdtsc() int64

// haveTSC reports whether the TSC ticks at a constant rate in every
// power state (constant_tsc and nonstop_tsc), so that it can time
// operations.
func haveTSC() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			f := " " + v + " "
			return strings.Contains(f, " constant_tsc ") && strings.Contains(f, " nonstop_tsc ")
		}
	}
	return false
}
