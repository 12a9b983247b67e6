package agent

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// benchPair is agent a connected to agent b (listening on network only),
// b offering a section "s" of n bytes at loc.
func benchPair(b testing.TB, network string, n int, loc engine.Location) (*Agent, *Agent, *engine.Buffer, *Peer) {
	ctx := testCtx(b)
	ea, eb := newEngine(b), newEngine(b)
	a := newAgent(b, ea, "a", agentOpts{})
	t := newAgent(b, eb, "b", agentOpts{unix: network == "unix", tcp: network == "tcp"})
	buf := alloc(b, eb, n, loc)
	require.NoError(b, t.Publish("s", buf.All()))
	_, err := a.Connect(ctx, t.Metadata().Unix+t.Metadata().TCP)
	require.NoError(b, err)
	p, err := a.Peer(ctx, "b")
	require.NoError(b, err)
	_, err = p.Endpoint(ctx)
	require.NoError(b, err)
	return a, t, buf, p
}

// BenchmarkWriteList: 1000 descriptors of 64 KiB against one contiguous
// put of the same 64 MiB, per transport: adjacent (one put after
// coalescing); scattered (the same destination bytes as the contiguous
// put, the blocks in a permuted order: no two coalesce); sparse (every
// other block of twice the span, permuted: the destination's footprint
// doubles, which costs memory-bound copies by itself).
func BenchmarkWriteList(b *testing.B) {
	const n, bs = 1000, 64 << 10
	for _, network := range []string{"unix", "tcp"} {
		for _, mode := range []string{"contiguous", "adjacent", "scattered", "sparse"} {
			b.Run(network+"/"+mode, func(b *testing.B) {
				ctx := testCtx(b)
				a, _, _, p := benchPair(b, network, 2*n*bs, engine.Host)
				src := alloc(b, a.eng, n*bs, engine.Host)
				var descs []Desc
				switch mode {
				case "contiguous":
					descs = []Desc{{Local: src.All(), Section: "s"}}
				case "adjacent":
					for i := range n {
						descs = append(descs, Desc{Local: src.Slice(i*bs, bs), Section: "s", Off: i * bs})
					}
				case "scattered":
					for i := range n {
						descs = append(descs, Desc{Local: src.Slice(i*bs, bs), Section: "s", Off: ((i * 7) % n) * bs})
					}
				case "sparse":
					for i := range n {
						descs = append(descs, Desc{Local: src.Slice(i*bs, bs), Section: "s", Off: 2 * ((i * 7) % n) * bs})
					}
				}
				// One Write first: the first touch of the source and of
				// the peer's section faults their pages in (about 6 ms
				// for 128 MiB), which is not the list's cost.
				require.NoError(b, p.Write(ctx, descs).Wait(ctx))
				b.SetBytes(n * bs)
				b.ResetTimer()
				for b.Loop() {
					if err := p.Write(ctx, descs).Wait(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkWriteListRatio: BenchmarkWriteList's contiguous and scattered
// Writes alternately, per transport, so that both see the same load of a
// shared machine: "ratio" is the contiguous time over the scattered time
// (list bandwidth over contiguous bandwidth; issue 19's goal is >= 0.95),
// "median-ratio" the median of the pairs' ratios.
func BenchmarkWriteListRatio(b *testing.B) {
	const n, bs = 1000, 64 << 10
	for _, network := range []string{"unix", "tcp"} {
		b.Run(network, func(b *testing.B) {
			ctx := testCtx(b)
			a, _, _, p := benchPair(b, network, 2*n*bs, engine.Host)
			src := alloc(b, a.eng, n*bs, engine.Host)
			whole := []Desc{{Local: src.All(), Section: "s"}}
			descs := make([]Desc, n)
			for i := range n {
				descs[i] = Desc{Local: src.Slice(i*bs, bs), Section: "s", Off: ((i * 7) % n) * bs}
			}
			for _, d := range [][]Desc{whole, descs} { // fault the pages in
				require.NoError(b, p.Write(ctx, d).Wait(ctx))
			}
			var tw, tl, cw, cl time.Duration
			var ratios []float64
			b.SetBytes(2 * n * bs)
			b.ResetTimer()
			for b.Loop() {
				t0, c0 := time.Now(), processCPU()
				if err := p.Write(ctx, whole).Wait(ctx); err != nil {
					b.Fatal(err)
				}
				t1, c1 := time.Now(), processCPU()
				if err := p.Write(ctx, descs).Wait(ctx); err != nil {
					b.Fatal(err)
				}
				t2, c2 := time.Now(), processCPU()
				tw += t1.Sub(t0)
				tl += t2.Sub(t1)
				cw += c1 - c0
				cl += c2 - c1
				ratios = append(ratios, float64(t1.Sub(t0))/float64(t2.Sub(t1)))
			}
			slices.Sort(ratios)
			b.ReportMetric(float64(tw)/float64(tl), "ratio")
			b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
			// The CPU both agents spent (this process's), contiguous over
			// scattered, and each one's share of the two cores: a list
			// that costs no more CPU but takes longer waited somewhere.
			b.ReportMetric(float64(cw)/float64(cl), "cpu-ratio")
			b.ReportMetric(float64(cw)/float64(tw), "cpus-contiguous")
			b.ReportMetric(float64(cl)/float64(tl), "cpus-scattered")
		})
	}
}

// BenchmarkWriteListSoftware: the software cost of a 1000-descriptor
// Write, per transport, planning to completion: 64 B pieces scattered in
// the peer's section, so that copying them costs next to nothing (64 KB).
// At 64 KiB pieces (BenchmarkWriteList) this cost is what a list loses
// to one contiguous Write of the same bytes: over TCP, where the kernel's
// copies keep both cores busy, as CPU taken from them ("cpu-ns/op": both
// agents', this process's user and system time).
func BenchmarkWriteListSoftware(b *testing.B) {
	for _, network := range []string{"unix", "tcp"} {
		b.Run(network, func(b *testing.B) {
			ctx := testCtx(b)
			p, descs := smallScattered(b, network)
			c0 := processCPU()
			for b.Loop() {
				if err := p.Write(ctx, descs).Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkPreparedPost: the CPU a post of 1000 prepared, scattered
// descriptors costs before the first byte moves (plan: the checks and
// coalescing done, the first Put not yet issued), and the whole post
// (every Put issued, not waited for).
func BenchmarkPreparedPost(b *testing.B) {
	const n, bs = 1000, 4 << 10
	for _, network := range []string{"unix", "tcp"} {
		for _, loc := range []engine.Location{engine.Host, engine.Gaudi(0)} {
			b.Run(fmt.Sprintf("%s/%v", network, loc), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
				defer cancel()
				a, _, dst, p := benchPair(b, network, 2*n*bs, loc)
				src := alloc(b, a.eng, n*bs, engine.Host)
				for i := range src.Bytes() {
					src.Bytes()[i] = byte(i%251) | 1 // no zero byte
				}
				local := make([]engine.Slice, n)
				remote := make([]RemoteDesc, n)
				idx := make([]int, n)
				for i := range n {
					local[i] = src.Slice(i*bs, bs)
					remote[i] = RemoteDesc{Section: "s", Off: 2 * ((i * 7) % n) * bs}
					idx[i] = i
				}
				px, err := p.Prepare(ctx, local, remote)
				require.NoError(b, err)
				b.Run("plan", func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					var cpu time.Duration
					for b.Loop() {
						c0 := threadCPU()
						runs, err := px.plan(idx, n)
						if err != nil {
							b.Fatal(err)
						}
						cpu += threadCPU() - c0
						px.recycle(runs)
					}
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				})
				if network == "unix" && loc == engine.Host {
					b.Run("first-byte", func(b *testing.B) { firstByte(b, ctx, px, idx, dst, remote[0].Off) })
				}
				b.Run("post", func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					var cpu time.Duration
					for b.Loop() {
						c0 := threadCPU()
						x := px.Write(ctx, idx)
						cpu += threadCPU() - c0
						b.StopTimer()
						if err := x.Wait(ctx); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				})
			})
		}
	}
}

// processCPU is the process's user and system time.
func processCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPU is the CPU time of the calling thread (lock it first): the
// work done whatever else runs on the machine.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// firstByte times a post from its call to its first byte landing in the
// peer's memory (the first word of the first descriptor, cleared before
// each post), seen by a goroutine polling it on another core. Over a
// unix socket the caller runs without blocking until it copies the first
// list, so this is the CPU the post costs before its first byte moves
// (and the few tens of nanoseconds the poller takes to see it); the mean
// also has the posts during which the runtime took the poller's core (a
// GC worker, say), the median not.
func firstByte(b *testing.B, ctx context.Context, px *Prepared, idx []int, dst *engine.Buffer, off int) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs a second core for the poller")
	}
	word := (*uint64)(unsafe.Pointer(&dst.Bytes()[off]))
	var lat []time.Duration
	for b.Loop() {
		atomic.StoreUint64(word, 0)
		landed := make(chan time.Time)
		var polling atomic.Bool
		go func() {
			polling.Store(true)
			for atomic.LoadUint64(word) == 0 {
			}
			landed <- time.Now()
		}()
		for !polling.Load() { // the poller runs on the other core
			runtime.Gosched()
		}
		t0 := time.Now()
		x := px.Write(ctx, idx)
		lat = append(lat, (<-landed).Sub(t0))
		if err := x.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	var total time.Duration
	for _, d := range lat {
		total += d
	}
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns-to-first-byte")
	b.ReportMetric(float64(lat[len(lat)*9/10].Nanoseconds()), "p90-ns-to-first-byte")
	b.ReportMetric(float64(total.Nanoseconds())/float64(len(lat)), "mean-ns-to-first-byte")
}

// BenchmarkNotifyLatency: one way, from the call to the target's Recv
// returning (agents in one process): an 8 B write with a notification,
// a notification alone, against an 8 B put's latency: the engine's
// (PutSync) and the agent's (Write and Wait).
func BenchmarkNotifyLatency(b *testing.B) {
	for _, network := range []string{"unix", "tcp"} {
		b.Run(network, func(b *testing.B) {
			ctx := testCtx(b)
			a, t, _, p := benchPair(b, network, 4096, engine.Host)
			src := alloc(b, a.eng, 8, engine.Host)
			ep, err := p.Endpoint(ctx)
			require.NoError(b, err)
			sec := p.keys["s"].key.Slice(64, 8)
			b.Run("put8", func(b *testing.B) {
				for b.Loop() {
					if err := ep.PutSync(ctx, src.All(), sec); err != nil {
						b.Fatal(err)
					}
				}
			})
			observe := func(b *testing.B, send func() error) {
				var total time.Duration
				for b.Loop() {
					t0 := time.Now()
					if err := send(); err != nil {
						b.Fatal(err)
					}
					if _, err := t.Recv(ctx); err != nil {
						b.Fatal(err)
					}
					total += time.Since(t0)
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/observed")
			}
			descs := []Desc{{Local: src.All(), Section: "s", Off: 64}}
			b.Run("write8", func(b *testing.B) { // the agent's 8 B put
				for b.Loop() {
					if err := p.Write(ctx, descs).Wait(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
			msg := []byte("ready")
			b.Run("write8+notify", func(b *testing.B) {
				observe(b, func() error {
					p.Write(ctx, descs, WithNotify(msg))
					return nil
				})
			})
			b.Run("notify", func(b *testing.B) {
				observe(b, func() error { return p.Notify(ctx, msg) })
			})
		})
	}
}

// plan turns the indices into coalesced runs, all of them (what a post
// plans, before and after its first list: BenchmarkPreparedPost's plan).
func (x *Prepared) plan(idx []int, nd int) ([]run, error) {
	runs, err := x.planFirst(idx, nd, nd)
	if err != nil {
		return nil, err
	}
	return x.planRest(idx, nd, runs), nil
}
