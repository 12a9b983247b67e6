package dma

import (
	"fmt"
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
			mem, err := d.AllocDevice(4096)
			if err != nil {
				b.Fatal(err)
			}
			host, err := AllocHostPages(4096)
			if err != nil {
				b.Fatal(err)
			}
			defer FreeHostPages(host)
			hm, err := d.MapHostBytes(host)
			if err != nil {
				b.Fatal(err)
			}
			cb, err := d.NewCB(4096)
			if err != nil {
				b.Fatal(err)
			}
			if err := cb.AddLinDMA(mem.Addr(), hm.DeviceAddr(), 4096); err != nil {
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

// benchDevice opens an emulated device of model m for a benchmark.
func benchDevice(b *testing.B, m hlsim.Model) *Device {
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
	return d
}
