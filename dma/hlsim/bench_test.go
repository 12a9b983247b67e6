package hlsim

import (
	"testing"
	"time"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// BenchmarkCSRoundTrip measures one emulated CS round trip: submit one CB
// holding one 4 KiB host-to-DRAM LIN_DMA, then WAIT_CS until it completes.
//
//	go test -run '^$' -bench CSRoundTrip -benchtime 2s ./dma/hlsim/
func BenchmarkCSRoundTrip(b *testing.B) {
	for _, m := range []Model{ModelGaudi2, ModelGaudi1} {
		b.Run("model="+m.String(), func(b *testing.B) {
			r := newRig(b, Config{Model: m})
			src, sva := r.host(4096)
			copy(src, pattern(4096, 1))
			dram := r.dram(4096)
			chunk := r.chunk(0, linDMA(r.g1, dram, sva, 4096))
			chunks := []hlsys.CSChunk{chunk}
			busy0 := r.d.Stats().DMABusy
			start := time.Now()
			n := 0
			for b.Loop() {
				out, err := hlsys.SubmitCS(r.b, nil, chunks, 0, 0)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := hlsys.WaitForCS(r.b, out.Seq, uint64(safety.Microseconds())); err != nil {
					b.Fatal(err)
				}
				n++
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(n), "ns/cs")
			b.ReportMetric(float64((r.d.Stats().DMABusy-busy0).Nanoseconds())/float64(n), "dma-busy-ns/cs")
		})
	}
}
