package bench

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParseTSCFlags: /proc/cpuinfo is the kernel's text (show_cpuinfo:
// "flags\t\t:" then " %s" per flag). Only the first flags line counts, a
// flag is set only when that line lists it as a whole space-separated word,
// and nothing after that line changes the result.
func FuzzParseTSCFlags(f *testing.F) {
	for _, s := range []string{
		"processor\t: 0\nflags\t\t: fpu tsc msr constant_tsc nonstop_tsc rdtscp\n",
		"flags\t\t: fpu rdtscp tsc_deadline_timer\n",
		"flags\t: fpu\n\nflags\t: tsc constant_tsc nonstop_tsc\n",
		"processor\t: 0\n",
		"flags:tsc",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cpuinfo string) {
		got := parseTSCFlags(cpuinfo)
		var words []string
		for i, line := range strings.Split(cpuinfo, "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || strings.TrimSpace(k) != "flags" {
				continue
			}
			words = strings.Split(v, " ")
			lines := strings.SplitAfter(cpuinfo, "\n")
			upTo := strings.Join(lines[:i+1], "")
			if again := parseTSCFlags(upTo + "\nflags: tsc constant_tsc nonstop_tsc\n"); again != got {
				t.Fatalf("lines after the first flags line changed %+v to %+v", got, again)
			}
			break
		}
		want := tscFlags{
			present:  slices.Contains(words, "tsc"),
			constant: slices.Contains(words, "constant_tsc"),
			nonstop:  slices.Contains(words, "nonstop_tsc"),
		}
		if got != want {
			t.Fatalf("parseTSCFlags(%q) = %+v, want %+v", cpuinfo, got, want)
		}
	})
}
