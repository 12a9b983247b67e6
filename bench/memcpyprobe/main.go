// Command memcpyprobe measures this machine's memory-copy limit: the best
// aggregate bandwidth of 1..N threads, each copying its own 64 MiB buffer
// with plain memcpy (glibc's) or Go's copy(), over and over
// (internal/memcopy/probe). gxfer's large host copies are judged by it
// (issue 20: a 64 MiB copy or unix put at 0.9x or more of the limit, never
// below one core's copy; engine's BenchmarkHostCopy64MiB measures the
// engine against the same probe in one run).
//
//	go run ./bench/memcpyprobe [-size 64MiB] [-threads N] [-time 500ms]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/gxfer/gxfer/bench"
	"github.com/gxfer/gxfer/internal/memcopy"
	"github.com/gxfer/gxfer/internal/memcopy/probe"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, out, errw io.Writer) int {
	fs := flag.NewFlagSet("memcpyprobe", flag.ContinueOnError)
	fs.SetOutput(errw)
	size := fs.String("size", "64MiB", "bytes each thread copies per call")
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "most threads to try")
	dur := fs.Duration("time", 500*time.Millisecond, "time per measurement")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	n, err := bench.ParseSize(*size)
	if err != nil || n < 4096 || *threads < 1 || *dur <= 0 {
		fmt.Fprintf(errw, "memcpyprobe: need -size >= 4KiB (got %q), -threads >= 1, -time > 0\n", *size)
		return 2
	}
	m := memcopy.Detect()
	fmt.Fprintf(out, "machine: %s\n", memcopy.New(memcopy.Config{Machine: &m}))
	b := probe.NewBuffers(n, *threads)
	all, best := b.Limit(*threads, *dur)
	fmt.Fprintf(out, "%-8s %7s %10s\n", "impl", "threads", "GB/s")
	for _, r := range all {
		fmt.Fprintf(out, "%-8s %7d %10.2f\n", r.Impl, r.Threads, r.GBps)
	}
	fmt.Fprintf(out, "limit: %.2f GB/s (%s, %d threads, %s each)\n", best.GBps, best.Impl, best.Threads, memcopy.FormatSize(n))
	return 0
}
