package memcopy

import (
	"fmt"
	"testing"
	"time"

	"github.com/gxfer/gxfer/internal/memcopy/probe"
)

// BenchmarkKernels: every kernel at every size, with the same source and
// destination every time (hot: in cache when they fit), the same pair
// copied back to back for at least 16 MiB a batch (loop: a put_bw run's
// steady state, which a short hot batch can miss), and with a new pair
// every time from pools larger than the last-level cache (fresh: src and
// dst come from memory). The kernels are interleaved: each iteration
// times a batch of every kernel in turn (a batch is at least 256 KiB of
// copies, so the clock's cost is negligible), so that a shared machine's
// load falls on all of them alike. glibc's memcpy (through cgo) runs
// alongside as the reference. Reports, per kernel, GB/s (10^9
// bytes) of its best batch ("best") and over all of its batches ("mean").
//
//	go test -run '^$' -bench Kernels -benchtime 100x ./internal/memcopy/
func BenchmarkKernels(b *testing.B) {
	cpu := detectCPU()
	const pool = 160 << 20 // per side; > 2x a 32 MiB L3 plus its share of L2s
	srcPool, dstPool := make([]byte, pool), make([]byte, pool)
	pattern(srcPool, 1)
	pattern(dstPool, 2)
	type kern struct {
		name string
		f    func(dst, src []byte)
	}
	var ks []kern
	for _, k := range Kernels() {
		if cpu.Has(k) {
			ks = append(ks, kern{k.String(), func(dst, src []byte) { run(k, dst, src) }})
		}
	}
	ks = append(ks, kern{"glibc-memcpy", probe.Glibc})
	for _, size := range []int{4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 3 << 19, 2 << 20, 3 << 20, 4 << 20, 6 << 20, 8 << 20, 12 << 20, 16 << 20, 32 << 20, 48 << 20, 64 << 20} {
		for _, mode := range []string{"hot", "loop", "fresh"} {
			fresh := mode == "fresh"
			b.Run(fmt.Sprintf("size=%s/%s", FormatSize(size), mode), func(b *testing.B) {
				batch := max(1, (256<<10)/size)
				if mode == "loop" {
					batch = max(1, (16<<20)/size)
				}
				slots := pool / size
				best := make([]time.Duration, len(ks))
				total := make([]time.Duration, len(ks))
				i, round := 0, 0
				for b.Loop() {
					for j := range ks {
						k := ks[(j+round)%len(ks)] // rotate the order too
						idx := (j + round) % len(ks)
						t0 := time.Now()
						for range batch {
							s, d := 0, 0
							if fresh {
								s, d = (i%slots)*size, ((i+slots/2)%slots)*size
								i++
							}
							k.f(dstPool[d:d+size], srcPool[s:s+size])
						}
						dt := time.Since(t0)
						total[idx] += dt
						if best[idx] == 0 || dt < best[idx] {
							best[idx] = dt
						}
					}
					round++
				}
				bytes := float64(size * batch)
				for j, k := range ks {
					b.ReportMetric(bytes/best[j].Seconds()/1e9, k.name+"-best-GB/s")
					b.ReportMetric(bytes*float64(b.N)/total[j].Seconds()/1e9, k.name+"-mean-GB/s")
				}
			})
		}
	}
}

// BenchmarkCopyV: 64 MiB as 1000 scattered pieces of 64 KiB copied one
// by one with Copy (each piece's kernel chosen by its 64 KiB), as one
// CopyV (the kernel of 64 MiB, split over cores), and as one contiguous
// Copy, with the engine's default copier.
//
//	go test -run '^$' -bench CopyV -benchtime 20x ./internal/memcopy/
func BenchmarkCopyV(b *testing.B) {
	const n, bs = 1000, 64 << 10
	c := New(Config{})
	src, dst := make([]byte, n*bs), make([]byte, 2*n*bs)
	pattern(src, 1)
	pattern(dst, 2)
	srcs, dsts := make([][]byte, n), make([][]byte, n)
	for i := range n {
		srcs[i] = src[i*bs : (i+1)*bs]
		o := 2 * ((i * 7) % n) * bs
		dsts[i] = dst[o : o+bs]
	}
	b.Run("pieces", func(b *testing.B) {
		b.SetBytes(n * bs)
		for b.Loop() {
			for i := range n {
				c.Copy(dsts[i], srcs[i])
			}
		}
	})
	b.Run("copyv", func(b *testing.B) {
		b.SetBytes(n * bs)
		for b.Loop() {
			c.CopyV(dsts, srcs)
		}
	})
	b.Run("contiguous", func(b *testing.B) {
		b.SetBytes(n * bs)
		for b.Loop() {
			c.Copy(dst[:n*bs], src)
		}
	})
}
