package memcopy

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Cache is one data or unified cache level of CPU 0, from sysfs.
type Cache struct {
	Level int
	Size  int // bytes
	// Sharers is how many CPUs share it (shared_cpu_list).
	Sharers int
}

// Caches are CPU 0's data and unified caches, lowest level first.
type Caches []Cache

// ReadCaches reads /sys/devices/system/cpu/cpu0/cache/index*/{level,
// type,size,shared_cpu_list} under root ("/" on a real system);
// instruction caches are skipped. An error if none could be read.
func ReadCaches(root string) (Caches, error) {
	dirs, err := filepath.Glob(filepath.Join(root, "sys/devices/system/cpu/cpu0/cache/index*"))
	if err != nil {
		return nil, err
	}
	var cs Caches
	for _, d := range dirs {
		rd := func(name string) string {
			b, _ := os.ReadFile(filepath.Join(d, name))
			return strings.TrimSpace(string(b))
		}
		if t := rd("type"); t != "Data" && t != "Unified" {
			continue
		}
		lvl, err := strconv.Atoi(rd("level"))
		if err != nil {
			continue
		}
		size, err := ParseSize(rd("size"))
		if err != nil {
			continue
		}
		sharers, err := CountCPUs(rd("shared_cpu_list"))
		if err != nil || sharers < 1 {
			sharers = 1
		}
		cs = append(cs, Cache{Level: lvl, Size: size, Sharers: sharers})
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("memcopy: no cache information under %s", root)
	}
	for i := 1; i < len(cs); i++ { // a few entries: insertion sort by level
		for j := i; j > 0 && cs[j].Level < cs[j-1].Level; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
	return cs, nil
}

// LLC is the last-level cache (the zero Cache if cs is empty).
func (cs Caches) LLC() Cache {
	if len(cs) == 0 {
		return Cache{}
	}
	return cs[len(cs)-1]
}

// Level is the cache of that level (the zero Cache if there is none).
func (cs Caches) Level(l int) Cache {
	for _, c := range cs {
		if c.Level == l {
			return c
		}
	}
	return Cache{}
}

// ParseSize parses a sysfs cache size: "32K", "32768K", "1M", "512".
func ParseSize(s string) (int, error) {
	s = strings.TrimSpace(s)
	mul := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mul, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > (1<<40)/mul {
		return 0, fmt.Errorf("memcopy: bad cache size %q", s)
	}
	return v * mul, nil
}

// CountCPUs counts the CPUs of a sysfs cpu list ("0-1", "0,2-5", "3").
func CountCPUs(list string) (int, error) {
	list = strings.TrimSpace(list)
	if list == "" {
		return 0, fmt.Errorf("memcopy: empty cpu list")
	}
	n := 0
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, fmt.Errorf("memcopy: bad cpu list %q", list)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<20 {
				return 0, fmt.Errorf("memcopy: bad cpu list %q", list)
			}
		}
		n += b - a + 1
		if n > 1<<20 {
			return 0, fmt.Errorf("memcopy: bad cpu list %q", list)
		}
	}
	return n, nil
}
