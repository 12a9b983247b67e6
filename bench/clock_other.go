//go:build !amd64

package bench

// tscArch: this architecture has no TSC; rdtsc is never called.
const tscArch = false

func rdtsc() int64 { return 0 }

// spinPause has no counterpart here.
func spinPause() {}
