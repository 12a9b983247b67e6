package memcopy

import (
	"fmt"
	"testing"
)

// BenchmarkKernels: every kernel at every size, with the same source and
// destination every iteration (hot: in cache when they fit) and with a
// new pair each iteration from pools larger than the last-level cache
// (fresh: src and dst come from memory). Reports GB/s (10^9 bytes).
//
//	go test -run '^$' -bench Kernels -benchtime 200ms ./internal/memcopy/
func BenchmarkKernels(b *testing.B) {
	cpu := detectCPU()
	const pool = 160 << 20 // per side; > 2x a 32 MiB L3 plus its share of L2s
	srcPool, dstPool := make([]byte, pool), make([]byte, pool)
	pattern(srcPool, 1)
	pattern(dstPool, 2)
	for _, size := range []int{4 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20, 64 << 20} {
		for _, fresh := range []bool{false, true} {
			for _, k := range Kernels() {
				if !cpu.Has(k) {
					continue
				}
				mode := "hot"
				if fresh {
					mode = "fresh"
				}
				b.Run(fmt.Sprintf("size=%s/%s/%s", FormatSize(size), mode, k), func(b *testing.B) {
					slots := pool / size
					// a stride that is not a multiple of 4 KiB sets
					// apart, so fresh pairs do not alias in the caches
					i := 0
					b.SetBytes(int64(size))
					for b.Loop() {
						s, d := 0, 0
						if fresh {
							s, d = (i%slots)*size, ((i+slots/2)%slots)*size
							i++
						}
						run(k, dstPool[d:d+size], srcPool[s:s+size])
					}
					b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
			}
		}
	}
}
