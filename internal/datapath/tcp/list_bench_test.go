package tcp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
)

// BenchmarkList compares a 1,000 x 64 KiB list scattered in both local
// and remote memory (StartList) with the same bytes as one contiguous
// Start, over loopback with the engine's default two lanes (issue 19:
// the list should reach >= 0.95x the contiguous bandwidth). Compare the
// MB/s of .../list and .../contiguous.
func BenchmarkList(b *testing.B) {
	const n, size = 1000, 64 << 10
	for _, put := range []bool{true, false} {
		for _, list := range []bool{false, true} {
			name := map[bool]string{true: "put", false: "get"}[put] + "/" + map[bool]string{true: "list", false: "contiguous"}[list]
			b.Run(name, func(b *testing.B) {
				runList, runWhole := listRuns(b, put, n, size)
				b.SetBytes(n * size)
				b.ResetTimer()
				for range b.N {
					if list {
						runList()
					} else {
						runWhole()
					}
				}
			})
		}
	}
}

// BenchmarkListRatio times the two of BenchmarkList alternately, so that
// both see the same load, and reports list-bandwidth/contiguous-bandwidth
// as "ratio" (the goal: >= 0.95), with the fake endpoints' reads
// spinning as the engine's default (50µs) or not.
func BenchmarkListRatio(b *testing.B) {
	const n, size = 1000, 64 << 10
	for _, spin := range []time.Duration{0, 50 * time.Microsecond} {
		for _, put := range []bool{true, false} {
			b.Run(fmt.Sprintf("spin=%v/%s", spin, map[bool]string{true: "put", false: "get"}[put]), func(b *testing.B) {
				fakeSpin = spin
				defer func() { fakeSpin = 0 }()
				listRatio(b, put, n, size)
			})
		}
	}
}

func listRatio(b *testing.B, put bool, n, size int) {
	runList, runWhole := listRuns(b, put, n, size)
	total := n * size
	var tl, tw, cl, cw time.Duration
	b.SetBytes(int64(2 * total))
	b.ResetTimer()
	for i := range b.N {
		for k := range 2 {
			start, cpu := time.Now(), cpuTime()
			if (i+k)%2 == 0 {
				runList()
				tl += time.Since(start)
				cl += cpuTime() - cpu
			} else {
				runWhole()
				tw += time.Since(start)
				cw += cpuTime() - cpu
			}
		}
	}
	b.ReportMetric(float64(tw)/float64(tl), "ratio")
	// The CPU both ends spent (the process's): on a loaded machine the
	// steadier measure of what the list costs more than the contiguous
	// transfer.
	b.ReportMetric(float64(cw)/float64(cl), "cpu-ratio")
}

// listRuns sets up BenchmarkList's two transfers over two lanes: n
// entries of size bytes scattered in local and remote memory (runList,
// one StartList) and the same bytes contiguous (runWhole, one Start);
// each runs one transfer and fails b on an error.
func listRuns(b *testing.B, put bool, n, size int) (runList, runWhole func()) {
	a, _ := lanePaths(b, n*size, listCaps, 2)
	sizes := make([]uint64, n)
	for i := range sizes {
		sizes[i] = uint64(size)
	}
	total := uint64(n * size)
	s := scatter(b, sizes, total, put, rand.New(rand.NewPCG(1, 1)), viewKey)
	whole := datapath.Req{Put: put, Local: datapath.Mem{B: s.local, Len: total}, Key: viewKey(total, 0, total)}
	runList = func() {
		c := newListCompletion(n)
		a.path.StartList(context.Background(), s.reqs, c)
		<-c.done
		for i, err := range c.errs {
			if err != nil {
				b.Fatal(fmt.Sprint("entry ", i, ": ", err))
			}
		}
	}
	runWhole = func() {
		c := newCompletion()
		a.path.Start(context.Background(), whole, c)
		<-c.done
		if c.err != nil {
			b.Fatal(c.err)
		}
	}
	return runList, runWhole
}

// cpuTime is the process's user and system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
