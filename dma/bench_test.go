package dma

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gxfer/gxfer/dma/hlsim"
)

var sinkN int

// BenchmarkEncodeLinDMA measures encoding one 24-byte LIN_DMA packet.
func BenchmarkEncodeLinDMA(b *testing.B) {
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		b.Run("model="+m.String(), func(b *testing.B) {
			var buf [LinDMASize]byte
			dst, src := uint64(0x1001_0000_0000), uint64(0x7f00_0000_1000)
			for b.Loop() {
				sinkN += EncodeLinDMA(buf[:], m, dst, src, 4096, MB)
				dst += 4096
			}
		})
	}
}

// BenchmarkCSRoundTrip measures one emulated CS round trip: Submit of a CB
// holding one 4 KiB host-to-device LIN_DMA, then Wait until it completes.
func BenchmarkCSRoundTrip(b *testing.B) {
	for _, m := range []hlsim.Model{hlsim.ModelGaudi1, hlsim.ModelGaudi2} {
		b.Run("model="+m.String(), func(b *testing.B) {
			d := benchDevice(b, m)
			dst, src := benchPair(b, d)
			cb, err := d.NewCB(4096)
			if err != nil {
				b.Fatal(err)
			}
			if err := cb.AddLinDMA(dst, src, 4096); err != nil {
				b.Fatal(err)
			}
			if d.Model() != ModelGaudi1 {
				if err := cb.AddNOP(EB | MB); err != nil {
					b.Fatal(err)
				}
			}
			chunks := []Chunk{cb.Chunk(d.H2DQueues()[0])}
			b.SetBytes(4096)
			for b.Loop() {
				seq, err := d.Submit(chunks)
				if err != nil {
					b.Fatal(err)
				}
				for {
					st, err := d.Wait(seq, time.Second)
					if err != nil {
						b.Fatal(err)
					}
					if st == CSCompleted {
						break
					}
				}
			}
		})
	}
}

// BenchmarkAddrKind: the lookup each Gaudi3 copy makes (twice) to choose
// its packets' direction, among n live host mappings.
func BenchmarkAddrKind(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("regions=%d", n), func(b *testing.B) {
			d := benchDevice(b, hlsim.ModelGaudi2)
			host, err := AllocHostPages(uint64(n) * 4096)
			if err != nil {
				b.Fatal(err)
			}
			defer FreeHostPages(host)
			addrs := make([]uint64, n)
			for i := range n {
				hm, err := d.MapHostBytes(host[i*4096 : (i+1)*4096])
				if err != nil {
					b.Fatal(err)
				}
				addrs[i] = hm.DeviceAddr()
			}
			i := 0
			for b.Loop() {
				if d.AddrKind(addrs[i%n]+100) != AddrHost {
					b.Fatal("not a host mapping")
				}
				i += 7
			}
		})
	}
}

// BenchmarkGaudiFloor is the floor under the engine's batch-1 overhead
// (engine BenchmarkGaudiOverhead, issue 20): this binding and the
// emulator with no engine at all. One command submission holding one
// 4 KiB host-to-device copy, encoded and sealed once, is submitted
// (SubmitUntil) and its completion polled (WaitCS with a zero timeout:
// one look) on the benchmark's goroutine without yielding, one after the
// other; the emulated engine runs on the other core.
// overhead-ns/op is, as the engine's, the wall time minus the emulated
// DMA's active time: what any engine built on this package pays per copy
// on this machine before it does anything of its own (the emulated
// driver's CS and WAIT_CS ioctls on the gaudi2 model, the ring write and
// the emulated queue manager's pickup and completion on gaudi3);
// sw-ns/op, as the engine's, leaves out the emulated driver's CS ioctl
// work too (hlsim Stats.EmuActive).
//
//	go test -run '^$' -bench GaudiFloor ./dma/
func BenchmarkGaudiFloor(b *testing.B) {
	for _, m := range []hlsim.Model{hlsim.ModelGaudi2, hlsim.ModelGaudi3} {
		b.Run(strings.ToLower(m.String()), func(b *testing.B) {
			if runtime.GOMAXPROCS(0) < 2 {
				b.Skip("needs two cores: the polling goroutine never yields to the emulated engine")
			}
			d, sim := benchDeviceSim(b, m)
			dst, src := benchPair(b, d)
			var cs CSBuilder
			if err := d.InitCSBuilder(&cs, CSOptions{Queues: d.H2DQueues()[:1], CBSize: 4096}); err != nil {
				b.Fatal(err)
			}
			if err := cs.Reserve(); err != nil {
				b.Fatal(err)
			}
			if err := cs.AddCopy(dst, src, 4096); err != nil {
				b.Fatal(err)
			}
			chunks, err := cs.Seal()
			if err != nil {
				b.Fatal(err)
			}
			st0 := sim.Stats()
			n := 0
			for b.Loop() {
				seq, err := d.SubmitUntil(chunks, nil)
				if err != nil {
					b.Fatal(err)
				}
				for {
					done, err := d.WaitCS(seq, 0)
					if err != nil {
						b.Fatal(err)
					}
					if done {
						break
					}
				}
				n++
			}
			st := sim.Stats()
			active, emu := st.DMAActive-st0.DMAActive, st.EmuActive-st0.EmuActive
			perOp := func(t time.Duration) float64 { return float64(t.Nanoseconds()) / float64(n) }
			b.ReportMetric(perOp(active), "dma-ns/op")
			b.ReportMetric(perOp(b.Elapsed()-active), "overhead-ns/op")
			b.ReportMetric(perOp(b.Elapsed()-emu), "sw-ns/op")
			cs.Release(func(cb *CB) { _ = cb.Close() })
		})
	}
}

// benchPair is a 4 KiB copy's two ends on d: device memory (dst) and a
// host page mapped into d (src), freed when the benchmark ends.
func benchPair(b *testing.B, d *Device) (dst, src uint64) {
	b.Helper()
	mem, err := d.AllocDevice(4096)
	if err != nil {
		b.Fatal(err)
	}
	host, err := AllocHostPages(4096)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = FreeHostPages(host) })
	hm, err := d.MapHostBytes(host)
	if err != nil {
		b.Fatal(err)
	}
	return mem.Addr(), hm.DeviceAddr()
}

// benchDevice opens an emulated device of model m for a benchmark.
func benchDevice(b *testing.B, m hlsim.Model) *Device {
	d, _ := benchDeviceSim(b, m)
	return d
}

// benchDeviceSim is benchDevice with the emulator behind the device.
func benchDeviceSim(b *testing.B, m hlsim.Model) (*Device, *hlsim.Device) {
	b.Helper()
	sim, err := hlsim.New(hlsim.Config{Model: m, DRAMSize: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sim.Close() })
	d, err := OpenBackend(sim.Name(), sim.Open, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	return d, sim
}
