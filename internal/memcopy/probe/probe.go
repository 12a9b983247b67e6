// Package probe measures this machine's memory-copy limit: the best
// aggregate bandwidth of 1..N threads each copying its own buffers with
// plain memcpy (glibc's, through cgo) or Go's copy(), the reference the
// engine's large host copies are judged by (bench/memcpyprobe prints it;
// engine's BenchmarkHostCopy64MiB measures against it in the same run).
package probe

/*
#include <string.h>
static void probe_memcpy(void *d, const void *s, size_t n) { memcpy(d, s, n); }
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Impl is a plain copy routine.
type Impl uint8

const (
	Memcpy Impl = iota // glibc's memcpy
	GoCopy             // Go's copy() (runtime memmove)
)

func (i Impl) String() string {
	if i == Memcpy {
		return "memcpy"
	}
	return "go-copy"
}

// Glibc copies min(len(dst), len(src)) bytes with glibc's memcpy (no
// overlap): the reference kernel of benchmarks.
func Glibc(dst, src []byte) {
	if n := min(len(dst), len(src)); n > 0 {
		C.probe_memcpy(unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0]), C.size_t(n))
	}
}

// Result is one measurement: threads copying size bytes each, over and
// over, for about the duration asked.
type Result struct {
	Impl    Impl
	Threads int
	Size    int
	GBps    float64 // aggregate, 10^9 bytes per second
}

func (r Result) String() string {
	return fmt.Sprintf("%s x%d %d MiB: %.2f GB/s", r.Impl, r.Threads, r.Size>>20, r.GBps)
}

// Buffers are each thread's source and destination, allocated once and
// touched (so no page fault is timed).
type Buffers struct {
	size     int
	src, dst [][]byte
}

// NewBuffers allocates threads pairs of size bytes.
func NewBuffers(size, threads int) *Buffers {
	b := &Buffers{size: size}
	for i := 0; i < threads; i++ {
		s, d := make([]byte, size), make([]byte, size)
		for j := 0; j < size; j += 4096 {
			s[j], d[j] = byte(j>>12)|1, 1
		}
		b.src, b.dst = append(b.src, s), append(b.dst, d)
	}
	return b
}

// Measure runs threads (at most the buffers') copying with impl for d,
// each on a locked OS thread, and returns the aggregate bandwidth.
func (b *Buffers) Measure(impl Impl, threads int, d time.Duration) Result {
	threads = min(threads, len(b.src))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bytes float64
	start := make(chan struct{})
	var t0 time.Time
	for i := 0; i < threads; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			s, dst := b.src[i], b.dst[i]
			<-start
			deadline := t0.Add(d)
			n := 0
			for n == 0 || time.Now().Before(deadline) {
				if impl == Memcpy {
					C.probe_memcpy(unsafe.Pointer(&dst[0]), unsafe.Pointer(&s[0]), C.size_t(len(s)))
				} else {
					copy(dst, s)
				}
				n++
			}
			mu.Lock()
			bytes += float64(n) * float64(len(s))
			mu.Unlock()
		}()
	}
	t0 = time.Now()
	close(start)
	wg.Wait()
	return Result{Impl: impl, Threads: threads, Size: b.size, GBps: bytes / time.Since(t0).Seconds() / 1e9}
}

// Limit measures 1..threads threads of each Impl for d each and returns
// every result and the best.
func (b *Buffers) Limit(threads int, d time.Duration) (all []Result, best Result) {
	for t := 1; t <= min(threads, len(b.src)); t++ {
		for _, impl := range []Impl{Memcpy, GoCopy} {
			r := b.Measure(impl, t, d)
			all = append(all, r)
			if r.GBps > best.GBps {
				best = r
			}
		}
	}
	return all, best
}
