package memcache

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
)

// nopRegistrar registers nothing, so benchmarks measure the cache alone.
type nopRegistrar struct{}

func (nopRegistrar) Register(uint64, uint64, Access) (any, error) { return nil, nil }
func (nopRegistrar) Deregister(uint64, uint64, any) error         { return nil }

var benchSizes = []struct {
	name string
	n    int
}{{"1k", 1_000}, {"10k", 10_000}, {"100k", 100_000}}

const benchBase = 0x7f00_0000_0000

// populate returns a cache holding n idle one-page regions separated by
// one-page gaps, and an address inside each region, in random order.
func populate(b *testing.B, n int) (*Cache, []uint64) {
	b.Helper()
	c, err := New(Config{Registrar: nopRegistrar{}, Align: 4096})
	if err != nil {
		b.Fatal(err)
	}
	addrs := make([]uint64, n)
	for i := range addrs {
		a := benchBase + uint64(i)*2*4096
		r, err := c.Get(a, 4096, AccessRead|AccessWrite)
		if err != nil {
			b.Fatal(err)
		}
		c.Put(r)
		addrs[i] = a + 512
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	runtime.GC() // collect the index versions built above before timing
	return c, addrs
}

// hitPatterns are the access patterns of the hit benchmarks. "random" walks
// a precomputed random permutation of all regions (no stride a prefetcher
// could follow): at 100k regions the regions alone take 6.4 MB and the hint
// table 2 MiB, more than the L2 cache, so nearly every hit misses the CPU
// caches. "hot" cycles through 256 regions taken from that permutation,
// spread over the whole index, so it measures the lookup itself.
var hitPatterns = []struct {
	name string
	pick func(addrs []uint64) []uint64
}{
	{"random", func(addrs []uint64) []uint64 { return addrs }},
	{"hot", func(addrs []uint64) []uint64 { return addrs[:min(256, len(addrs))] }},
}

// BenchmarkHit measures a Get that hits plus its Put in a cache holding 1k,
// 10k or 100k regions.
func BenchmarkHit(b *testing.B) {
	for _, s := range benchSizes {
		for _, p := range hitPatterns {
			b.Run("regions="+s.name+"/pattern="+p.name, func(b *testing.B) {
				c, all := populate(b, s.n)
				defer c.Close()
				hitLoop(b, c, p.pick(all), s.n, p.name == "random")
			})
		}
	}
}

// BenchmarkHitIrregular is BenchmarkHit's random pattern over regions laid
// out like real buffers rather than on a stride: 1 to 4 pages long,
// separated by gaps of 1 to 16 pages, hit at a random offset. Multi-page
// regions occupy one hint-table granule per page, so the table sees more
// keys than regions, and irregular addresses collide in it as random keys
// do, where a fixed stride spreads perfectly.
func BenchmarkHitIrregular(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("regions="+s.name+"/pattern=random", func(b *testing.B) {
			c, err := New(Config{Registrar: nopRegistrar{}, Align: 4096})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			rng := rand.New(rand.NewPCG(3, 4))
			addrs := make([]uint64, s.n)
			a := uint64(benchBase)
			for i := range addrs {
				size, gap := uint64(1+rng.IntN(4))*4096, uint64(1+rng.IntN(16))*4096
				r, err := c.Get(a, size, AccessRead|AccessWrite)
				if err != nil {
					b.Fatal(err)
				}
				c.Put(r)
				addrs[i] = a + uint64(rng.IntN(int(size)-256))
				a += size + gap
			}
			rng.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
			runtime.GC()
			hitLoop(b, c, addrs, s.n, true)
		})
	}
}

// hitLoop times a Get that hits plus its Put, cycling through addrs, in
// a cache whose n regions are registered (every Get must hit); random:
// report the hit's CPU time in dependent cache misses too.
func hitLoop(b *testing.B, c *Cache, addrs []uint64, n int, random bool) {
	hit := timeHits(b, c, addrs)
	if random {
		miss := missLatency(b, 2*n)
		b.ReportMetric(miss, "cpu-ns/miss")
		b.ReportMetric(hit/miss, "misses/hit")
	}
	if st := c.Stats(); st.Misses != uint64(n) {
		b.Fatalf("%d misses", st.Misses-uint64(n))
	}
}

// missLatency returns the thread CPU time, in nanoseconds, of one dependent
// load that misses the CPU caches as often as a random hit's loads do: a
// walk of a random cycle through lines cache lines (64 B apart), each load's
// address read by the one before. BenchmarkHit's random rows measure it
// right after their own loop and report the hit's CPU time in these units
// ("misses/hit"): on a machine shared with memory-heavy jobs a miss can cost
// several hundred nanoseconds, and the ratio says how many misses' worth of
// latency a hit costs whatever the load.
func missLatency(b *testing.B, lines int) float64 {
	const stride = 8 // uint64s per cache line
	next := make([]uint64, lines*stride)
	perm := rand.New(rand.NewPCG(7, 8)).Perm(lines)
	for i, l := range perm {
		next[l*stride] = uint64(perm[(i+1)%lines] * stride)
	}
	p := uint64(0)
	for range lines { // warm up: bring in what fits
		p = next[p]
	}
	const steps = 1 << 18
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU(b)
	for range steps {
		p = next[p]
	}
	d := threadCPU(b) - start
	missSink.Store(p)
	return float64(d) / steps
}

// missSink keeps missLatency's walk from being optimised away.
var missSink atomic.Uint64

// BenchmarkHitLargeRegion measures hits at random page offsets inside one
// 4 GiB region: a million pages, each its own hint-table granule, so most
// hits find their slot empty or holding another page's entry and walk the
// (one-leaf) index: the hint table's worst case.
func BenchmarkHitLargeRegion(b *testing.B) {
	c, err := New(Config{Registrar: nopRegistrar{}, Align: 4096})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const pages = 1 << 20
	r, err := c.Get(benchBase, pages*4096, AccessRead|AccessWrite)
	if err != nil {
		b.Fatal(err)
	}
	c.Put(r)
	addrs := make([]uint64, pages)
	for i := range addrs {
		addrs[i] = benchBase + uint64(i)*4096 + 512
	}
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	timeHits(b, c, addrs)
}

// timeHits times a Get that hits plus its Put, cycling through addrs, and
// reports ns/hit; it returns the hit's CPU time (startCPU).
func timeHits(b *testing.B, c *Cache, addrs []uint64) float64 {
	i := 0
	cpu := startCPU(b)
	for b.Loop() {
		r, err := c.Get(addrs[i], 256, AccessRead)
		if err != nil {
			b.Fatal(err)
		}
		c.Put(r)
		if i++; i == len(addrs) {
			i = 0
		}
	}
	hit := cpu.stop("hit")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/hit")
	return hit
}

// BenchmarkHitParallel is BenchmarkHit from GOMAXPROCS goroutines at once,
// each walking the addresses from its own starting point; ns/hit is wall
// time per hit across all of them.
func BenchmarkHitParallel(b *testing.B) {
	for _, s := range benchSizes {
		for _, p := range hitPatterns {
			b.Run("regions="+s.name+"/pattern="+p.name, func(b *testing.B) {
				c, all := populate(b, s.n)
				defer c.Close()
				addrs := p.pick(all)
				var seed atomic.Uint64
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := rand.New(rand.NewPCG(seed.Add(1), 0)).IntN(len(addrs))
					for pb.Next() {
						r, err := c.Get(addrs[i], 256, AccessRead)
						if err != nil {
							b.Error(err)
							return
						}
						c.Put(r)
						if i++; i == len(addrs) {
							i = 0
						}
					}
				})
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/hit")
			})
		}
	}
}

// BenchmarkMiss measures a miss that registers a new region (with a no-op
// registrar) and indexes it, plus the Put and the Invalidate that
// deregisters it again, in a cache holding 1k, 10k or 100k other regions.
func BenchmarkMiss(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("regions="+s.name, func(b *testing.B) {
			c, addrs := populate(b, s.n)
			defer c.Close()
			i := 0
			cpu := startCPU(b)
			for b.Loop() {
				a := addrs[i] + 4096 // in the gap after a region
				r, err := c.Get(a, 256, AccessRead)
				if err != nil {
					b.Fatal(err)
				}
				c.Put(r)
				c.Invalidate(a, 256)
				if i++; i == len(addrs) {
					i = 0
				}
			}
			cpu.stop("miss")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/miss")
		})
	}
}

// BenchmarkTypeCacheLookup measures TypeCache.Lookup of random entries.
func BenchmarkTypeCacheLookup(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("entries="+s.name, func(b *testing.B) {
			tc := NewTypeCache()
			addrs := make([]uint64, s.n)
			for i := range addrs {
				a := benchBase + uint64(i)*0x20000
				if err := tc.Insert(a, 0x10000, MemGaudi, i%8, nil); err != nil {
					b.Fatal(err)
				}
				addrs[i] = a + 0x100
			}
			rand.New(rand.NewPCG(3, 4)).Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
			i := 0
			for b.Loop() {
				if _, ok := tc.Lookup(addrs[i], 64); !ok {
					b.Fatal("not found")
				}
				if i++; i == len(addrs) {
					i = 0
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/lookup")
		})
	}
}
