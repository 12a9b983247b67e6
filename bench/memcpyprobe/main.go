// Command memcpyprobe measures this machine's memory-copy limit: the best
// aggregate bandwidth of 1..N threads, each copying its own 64 MiB buffer
// with plain memcpy (glibc's) or Go's copy(), over and over
// (internal/memcopy/probe). gxfer's large host copies are judged by it
// (issue 20: a 64 MiB copy or unix put at 0.9x or more of the limit, never
// below one core's copy).
//
// With -engine it measures them against it in the same run: -reps rounds
// of -slices slices; a slice runs, in an order rotating between slices,
// every probe configuration once (memcpy and copy() on 1..N threads, one
// copy of -size per thread), an engine CopySync between two host buffers
// and a unix put (engine Binding) into a peer process's host buffer (this
// binary re-executed), -size bytes each. A round keeps each one's best
// slice, the figure a shared machine's load disturbed least, alike for
// all, and prints it as a line in Go benchmark format (engine-GB/s,
// put-GB/s, limit-GB/s, onecore-GB/s and their ratios) and the means in a
// comment; bench/compare-all.sh runs it so.
//
//	go run ./bench/memcpyprobe [-size 64MiB] [-threads N] [-time 500ms]
//	go run ./bench/memcpyprobe -engine [-reps 5] [-slices 20] [-workers N]
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

func main() {
	if path := os.Getenv(peerEnv); path != "" {
		os.Exit(runPeer(path, os.Getenv(peerSizeEnv), os.Stdout))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, out, errw io.Writer) int {
	fs := flag.NewFlagSet("memcpyprobe", flag.ContinueOnError)
	fs.SetOutput(errw)
	size := fs.String("size", "64MiB", "bytes each thread copies per call")
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "most threads to try")
	dur := fs.Duration("time", 500*time.Millisecond, "time per measurement")
	eng := fs.Bool("engine", false, "also measure an engine copy and a unix put of -size against the probe, interleaved")
	reps := fs.Int("reps", 5, "-engine: rounds")
	slices := fs.Int("slices", 20, "-engine: slices per round (each runs every measurement once)")
	workers := fs.Int("workers", 0, "-engine: the engine's CopyWorkers (0: its default, GOMAXPROCS)")
	ntMin := fs.String("ntmin", "0", "-engine: the engine's CopyNTMin, a size (0: its default, from the caches; -1: never non-temporal)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	n, err := bench.ParseSize(*size)
	nt := 0
	switch *ntMin {
	case "0":
	case "-1":
		nt = -1
	default:
		if err == nil {
			nt, err = bench.ParseSize(*ntMin)
		}
	}
	if err != nil || n < 4096 || *threads < 1 || *dur <= 0 || *reps < 1 || *slices < 1 || *workers < 0 {
		fmt.Fprintf(errw, "memcpyprobe: need -size >= 4KiB (got %q), -threads >= 1, -time > 0, -reps >= 1, -slices >= 1, -workers >= 0, -ntmin a size or -1\n", *size)
		return 2
	}
	m := memcopy.Detect()
	fmt.Fprintf(out, "machine: %s\n", memcopy.New(memcopy.Config{Machine: &m, Workers: *workers, NTFrom: nt}))
	if *eng {
		if err := measureEngine(out, n, *threads, *reps, *slices, *workers, nt); err != nil {
			fmt.Fprintln(errw, "memcpyprobe:", err)
			return 1
		}
		return 0
	}
	b := probe.NewBuffers(n, *threads)
	all, best := b.Limit(*threads, *dur)
	fmt.Fprintf(out, "%-8s %7s %10s\n", "impl", "threads", "GB/s")
	for _, r := range all {
		fmt.Fprintf(out, "%-8s %7d %10.2f\n", r.Impl, r.Threads, r.GBps)
	}
	fmt.Fprintf(out, "limit: %.2f GB/s (%s, %d threads, %s each)\n", best.GBps, best.Impl, best.Threads, memcopy.FormatSize(n))
	return 0
}
