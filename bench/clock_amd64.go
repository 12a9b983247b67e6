package bench

// tscArch: this architecture has a TSC that rdtsc reads.
const tscArch = true

// rdtsc reads the time-stamp counter.
func rdtsc() int64
