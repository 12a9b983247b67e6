package hlsim

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/cpu"

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

// BenchmarkCoreHandoff is the machine's floor for handing work between
// two cores: two goroutines, each locked to its own thread, pass a
// counter back and forth through two cache lines, spinning without
// yielding; ns/op is one round trip. A batch-1 copy on the emulated
// Gaudi2 makes such a round trip at least once (to the emulated engine
// and back to the waiter), plus one for every further line the two sides
// both write on the way.
//
//	go test -run '^$' -bench CoreHandoff ./dma/hlsim/
func BenchmarkCoreHandoff(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two cores: the spinning sides never yield")
	}
	var ping, pong struct {
		v atomic.Int64
		_ cpu.CacheLinePad
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for i := int64(1); ; i++ {
			for ping.v.Load() != i {
				if ping.v.Load() < 0 {
					return
				}
			}
			pong.v.Store(i)
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	i := int64(0)
	for b.Loop() {
		i++
		ping.v.Store(i)
		for pong.v.Load() != i {
		}
	}
	ping.v.Store(-1)
	<-done
}
