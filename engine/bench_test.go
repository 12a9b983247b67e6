package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkHostBatch8B: 8-byte host-to-host copies submitted in batches of
// 1024 through the engine; reports ops/s.
func BenchmarkHostBatch8B(b *testing.B) {
	e := newEngine(b, Config{Devices: DevicesNone})
	src, _ := e.Alloc(8<<10, Host)
	dst, _ := e.Alloc(8<<10, Host)
	ctx := context.Background()
	bt := e.NewBatch()
	const n = 1024
	ops := 0
	for b.Loop() {
		for i := 0; i < n; i++ {
			bt.Copy(dst.Slice(i*8, 8), src.Slice(i*8, 8))
		}
		if err := bt.Submit(ctx).Wait(ctx); err != nil {
			b.Fatal(err)
		}
		ops += n
	}
	b.ReportMetric(float64(ops)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkHostCopy16MiB: a 16 MiB host-to-host copy through the engine
// against a plain copy() of the same buffers, alternated in one run;
// reports both GB/s and their ratio.
func BenchmarkHostCopy16MiB(b *testing.B) {
	e := newEngine(b, Config{Devices: DevicesNone})
	const size = 16 << 20
	src, _ := e.Alloc(size, Host)
	dst, _ := e.Alloc(size, Host)
	fill(src.Bytes(), 1)
	ctx := context.Background()
	var tEng, tCopy time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := e.CopySync(ctx, dst.All(), src.All()); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		copy(dst.Bytes(), src.Bytes())
		tCopy += time.Since(t1)
		tEng += t1.Sub(t0)
	}
	gb := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e9 }
	b.ReportMetric(gb(tEng), "engine-GB/s")
	b.ReportMetric(gb(tCopy), "copy-GB/s")
	b.ReportMetric(gb(tEng)/gb(tCopy), "ratio")
}

// BenchmarkGaudiOverhead: 4 KiB host-to-Gaudi copies on the emulated
// device at batch sizes 1, 16 and 256, each batch submitted and waited
// for before the next.
//
// overhead-ns/op is the engine's software cost per copy: the wall time
// from submission to resolved future, minus the emulated DMA time on the
// critical path, per op. The latter is the emulator's DMAActive: the wall
// time during which at least one of its DMA engines was executing a
// command buffer (fetching the CB through the MMU, parsing its packets,
// moving the bytes), the union of the engines' busy intervals. As it
// never exceeds the elapsed time, the overhead cannot go negative (the
// engines' busy time summed over queues, dma-sum-ns/op, can exceed the
// wall time when a batch runs on several queues at once). Everything
// else counts as overhead: the copier's work, the emulated driver's CS
// and WAIT_CS ioctls, and every goroutine hand-off.
//
// sw-ns/op also leaves out the emulated driver's CS ioctl (hlsim's
// EmuActive: engines executing or a CS ioctl running), whose cost is the
// emulator's, not gxfer's: what is left is gxfer's own software, its
// goroutine hand-offs and the time to notice completions.
func BenchmarkGaudiOverhead(b *testing.B) {
	for _, model := range []string{"gaudi2", "gaudi3"} {
		for _, batch := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("%s/batch=%d", model, batch), func(b *testing.B) {
				gaudiOverhead(b, model, batch)
			})
		}
	}
}

func gaudiOverhead(b *testing.B, model string, batch int) {
	e := newEngine(b, Config{Emulator: EmulatorConfig{Model: model}})
	const size = 4096
	h, _ := e.Alloc(size*batch, Host)
	d, _ := e.Alloc(size*batch, Gaudi(0))
	ctx := context.Background()
	bt := e.NewBatch()
	sim := e.cp.Devs[0].Sim
	st0 := sim.Stats()
	ops := 0
	for b.Loop() {
		for i := 0; i < batch; i++ {
			bt.Copy(d.Slice(i*size, size), h.Slice(i*size, size))
		}
		if err := bt.Submit(ctx).Wait(ctx); err != nil {
			b.Fatal(err)
		}
		ops += batch
	}
	st := sim.Stats()
	active, emu := st.DMAActive-st0.DMAActive, st.EmuActive-st0.EmuActive
	perOp := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(ops) }
	b.ReportMetric(perOp(b.Elapsed()), "ns/op-total")
	b.ReportMetric(perOp(active), "dma-ns/op")
	b.ReportMetric(perOp(st.DMABusy-st0.DMABusy), "dma-sum-ns/op")
	b.ReportMetric(perOp(b.Elapsed()-active), "overhead-ns/op")
	b.ReportMetric(perOp(b.Elapsed()-emu), "sw-ns/op")
}

// BenchmarkIdleCPU: the CPU time of an engine with one emulated Gaudi
// that sits idle for 10 s after a burst of copies (so its completion
// actor, workers and the emulator's engines have all run, spun and
// parked): the process's user+system time from getrusage over the idle
// period, in ms and as a share of one core. The spin windows are bounded
// (PollSpin, WaitSpin, the emulator's EngineSpin), so this stays near
// zero. One iteration takes 10 s:
//
//	go test -run '^$' -bench IdleCPU -benchtime 1x ./engine/
func BenchmarkIdleCPU(b *testing.B) {
	for _, model := range []string{"gaudi2", "gaudi3"} {
		b.Run(model, func(b *testing.B) { idleCPU(b, model) })
	}
}

func idleCPU(b *testing.B, model string) {
	const idle = 10 * time.Second
	e := newEngine(b, Config{Emulator: EmulatorConfig{Model: model}})
	const size = 4096
	h, _ := e.Alloc(16*size, Host)
	d, _ := e.Alloc(16*size, Gaudi(0))
	ctx := context.Background()
	bt := e.NewBatch()
	for range 100 {
		for i := range 16 {
			bt.Copy(d.Slice(i*size, size), h.Slice(i*size, size))
		}
		if err := bt.Submit(ctx).Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var cpu, wall time.Duration
	for b.Loop() {
		c0, t0 := processCPU(b), time.Now()
		time.Sleep(idle)
		cpu += processCPU(b) - c0
		wall += time.Since(t0)
	}
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/idle-10s")
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu-%")
}

// processCPU is the process's user+system CPU time (getrusage).
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRepeatedTransfer: the same 64 buffers (64 KiB each) copied host
// to Gaudi as one batch per iteration, with the registration cache on and
// off. Run with -benchtime=10000x for the 10,000-round workload; regs is
// the number of host mappings performed in the whole run.
func BenchmarkRepeatedTransfer(b *testing.B) {
	for _, disabled := range []bool{false, true} {
		name := "cache=on"
		if disabled {
			name = "cache=off"
		}
		b.Run(name, func(b *testing.B) {
			e := newEngine(b, Config{RegCache: RegCacheConfig{Disabled: disabled}})
			const nbuf, size = 64, 64 << 10
			hs, d := repeatedSetup(b, e, nbuf, size)
			ctx := context.Background()
			for b.Loop() {
				if err := repeatedRound(ctx, e, hs, d, size); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(e.Stats().Devices[0].HostMappings), "regs")
			b.ReportMetric(b.Elapsed().Seconds(), "wall-s")
		})
	}
}

// BenchmarkIPCBindingPutN: puts into a peer process's host buffer through
// a Binding, one Put call each (put) against PutN in runs of 256 (putN,
// the loop of gxfer perf's put_bw); ns/op and MB/s are per put.
//
//	go test -run '^$' -bench IPCBindingPutN ./engine/
func BenchmarkIPCBindingPutN(b *testing.B) {
	p := startPeer(b)
	e := newEngine(b, Config{Devices: DevicesNone})
	ctx := context.Background()
	ep, err := e.Dial(ctx, "unix", p.path)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{8, 4 << 10, 64 << 10} {
		h, _ := e.Alloc(n, Host)
		fill(h.Bytes(), uint64(n))
		bd, err := ep.Bind(ctx, h.All(), p.host.Slice(0, n))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("size=%d/put", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if err := bd.Put(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("size=%d/putN", n), func(b *testing.B) {
			const run = 256
			b.SetBytes(int64(n))
			left := b.N
			for left > 0 {
				k := min(left, run)
				if err := bd.PutN(k); err != nil {
					b.Fatal(err)
				}
				left -= k
			}
		})
		if err := bd.Close(); err != nil {
			b.Fatal(err)
		}
		if err := h.Free(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTCPPut: PutSyncs into another engine's host buffer over TCP
// (one lane): the round trip of a request, its Data frame and the owner's
// Completion. Small ones are sent from the caller's goroutine, 1 MiB ones
// by the connection's drain task (env.Go); ctx=cancel passes a context
// that can end, which each request watches (ctxWatch), as a caller's
// usually can; ctx=per-put makes a context for each Put and cancels it
// after (the defer cancel() of a caller with a timeout per request).
//
//	go test -run '^$' -bench TCPPut ./engine/
func BenchmarkTCPPut(b *testing.B) { benchTCPPut(b, 1) }

// BenchmarkTCPPutLanes: BenchmarkTCPPut on an endpoint with the default
// lanes (a lone small request should stay as fast as on one lane).
func BenchmarkTCPPutLanes(b *testing.B) { benchTCPPut(b, 0) }

func benchTCPPut(b *testing.B, lanes int) {
	owner := newEngine(b, Config{Devices: DevicesNone})
	user := newEngine(b, Config{Devices: DevicesNone, TCPLanes: lanes})
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ep, err := user.Dial(context.Background(), "tcp", l.Addr(), WithTransport(TransportTCP))
	if err != nil {
		b.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		n    int
		name string
		ctx  context.Context
	}{{8, "background", context.Background()}, {4 << 10, "background", context.Background()},
		{8, "cancel", cctx}, {8, "per-put", nil}, {1 << 20, "background", context.Background()}, {1 << 20, "cancel", cctx}} {
		n, ctx := tc.n, tc.ctx
		b.Run(fmt.Sprintf("size=%d/ctx=%s", n, tc.name), func(b *testing.B) {
			dst, _ := owner.Alloc(n, Host)
			k, err := dst.Export()
			if err != nil {
				b.Fatal(err)
			}
			src, _ := user.Alloc(n, Host)
			b.SetBytes(int64(n))
			for b.Loop() {
				pctx, pcancel := ctx, context.CancelFunc(nil)
				if ctx == nil { // a context per Put, ended after it
					pctx, pcancel = context.WithCancel(context.Background())
				}
				err := ep.PutSync(pctx, src.All(), k)
				if pcancel != nil {
					pcancel()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
