package bench

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// MaxSize is the largest message size accepted by ParseSize (1 GiB).
const MaxSize = 1 << 30

// ParseSize parses a message size: a positive number of bytes with an
// optional binary suffix, K/KB/KiB (2^10), M/MB/MiB (2^20) or G/GB/GiB
// (2^30), case-insensitive, or B for bytes. "8", "4K", "64KiB" and "1m" are
// all valid.
func ParseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	u := strings.ToUpper(t)
	mult := 1
	for _, sfx := range []struct {
		s string
		m int
	}{
		{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30},
		{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
	} {
		if strings.HasSuffix(u, sfx.s) {
			u, mult = strings.TrimSpace(strings.TrimSuffix(u, sfx.s)), sfx.m
			break
		}
	}
	n, err := strconv.ParseUint(u, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("bad size %q (want a positive byte count such as 8, 4K, 64KiB, 1M)", s)
	}
	if n > MaxSize/uint64(mult) {
		return 0, fmt.Errorf("size %q is larger than the maximum %s", s, FormatSize(MaxSize))
	}
	return int(n) * mult, nil
}

// ParseSizes parses a comma-separated list of sizes ("8,4K,64K,1M").
func ParseSizes(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if strings.TrimSpace(f) == "" {
			return nil, fmt.Errorf("bad size list %q: empty element", list)
		}
		n, err := ParseSize(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseSweep parses "MIN:MAX" and returns the powers of two from MIN to
// MAX inclusive. MIN and MAX must be powers of two with MIN <= MAX.
func ParseSweep(s string) ([]int, error) {
	lo, hi, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("bad sweep %q (want MIN:MAX, e.g. 8:16M)", s)
	}
	a, err := ParseSize(lo)
	if err != nil {
		return nil, err
	}
	b, err := ParseSize(hi)
	if err != nil {
		return nil, err
	}
	if bits.OnesCount(uint(a)) != 1 || bits.OnesCount(uint(b)) != 1 {
		return nil, fmt.Errorf("bad sweep %q: MIN and MAX must be powers of two", s)
	}
	if a > b {
		return nil, fmt.Errorf("bad sweep %q: MIN is larger than MAX", s)
	}
	var out []int
	for n := a; n <= b; n *= 2 {
		out = append(out, n)
	}
	return out, nil
}

// FormatSize renders a size exactly, with the largest binary unit that
// divides it: 8B, 4KiB, 16MiB, 1GiB; 1000 and 1536 stay "1000B", "1536B".
func FormatSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.Itoa(n>>30) + "GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// FormatBytes renders a byte count for humans with binary units
// ("4.00 GiB", "512 B").
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
