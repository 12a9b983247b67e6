package rdma_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gxfer/gxfer/rdma"
)

// Benchmarks need an RDMA device (testbed/rxe/bench-compare.sh runs them in
// the Soft-RoCE VM next to perftest). Modes: "event" sleeps on the
// completion channel through the netpoller, "busy" busy-polls the CQ.

var cqModes = []struct {
	name string
	cfg  rdma.CQConfig
}{
	{"event", rdma.CQConfig{}},
	{"busy", rdma.CQConfig{BusyPoll: true}},
	{"manual", rdma.CQConfig{Manual: true}},
	{"spin50us", rdma.CQConfig{Spin: 50 * time.Microsecond}},
}

type credits chan struct{}

func (c credits) Complete(x rdma.Completion) {
	if x.Err != nil {
		panic(x.Err) // recovered and counted by the CQ; checked below
	}
	c <- struct{}{}
}

// BenchmarkWriteBandwidth keeps a window of RDMA writes in flight, like
// ib_write_bw: "w16" posts one WR per Post call; "w64/chain8" keeps 64 in
// flight and posts them in chains of 8 (one cgo call and one doorbell each).
func BenchmarkWriteBandwidth(b *testing.B) {
	for _, size := range []int{64 << 10} {
		for _, m := range cqModes {
			b.Run(sizeName(size)+"/"+m.name+"/w16", func(b *testing.B) { benchWriteBW(b, m.cfg, size, 16, 1) })
			b.Run(sizeName(size)+"/"+m.name+"/w64/chain8", func(b *testing.B) { benchWriteBW(b, m.cfg, size, 64, 8) })
		}
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func benchWriteBW(b *testing.B, cfg rdma.CQConfig, size, window, chain int) {
	e := newEnv(b, cfg)
	a, _ := e.pairWith(b, rdma.QPConfig{SendCQ: e.cq, GIDIndex: gidIndex(), MaxSend: window})
	src, dst := e.mem(b, size*window), e.mem(b, size*window)
	fill(src.b, 1)
	cr := make(credits, window)
	for i := 0; i < window; i++ {
		cr <- struct{}{}
	}
	segs := make([]rdma.Seg, chain)
	wrs := make([]rdma.WR, chain)
	for i := range wrs {
		wrs[i] = rdma.WR{Op: rdma.OpWrite, Local: segs[i : i+1], Done: cr}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	take := func() {
		if !cfg.Manual {
			<-cr
			return
		}
		for {
			select {
			case <-cr:
				return
			default:
				if e.cq.Progress() == 0 {
					runtime.Gosched()
				}
			}
		}
	}
	for i := 0; i < b.N; {
		n := min(chain, b.N-i)
		for j := 0; j < n; j++ { // wait for n free slots in the window
			take()
		}
		for j := 0; j < n; j++ {
			o := uint64((i+j)%window) * uint64(size)
			segs[j] = src.mr.Seg(o, uint64(size))
			wrs[j].Remote = dst.mr.Remote().At(o)
		}
		if _, err := a.Post(wrs[:n]); err != nil {
			b.Fatal(err)
		}
		i += n
	}
	for j := 0; j < window; j++ {
		take()
	}
	b.StopTimer()
	if p := e.cq.Stats().Panics; p != 0 {
		b.Fatalf("%d failed completions", p)
	}
	b.ReportMetric(float64(size)*float64(b.N)*8/b.Elapsed().Seconds()/1e9, "Gb/s")
}

// BenchmarkWriteLatency is one 8-byte RDMA write at a time, waiting for its
// completion (post -> ACK -> CQE -> Completer -> waiting goroutine): a full
// round trip plus the completion path.
func BenchmarkWriteLatency(b *testing.B) {
	for _, m := range cqModes {
		b.Run("8B/"+m.name, func(b *testing.B) {
			e := newEnv(b, m.cfg)
			a, _ := e.pair(b)
			buf := e.mem(b, 4096)
			ctx := context.Background()
			wr := rdma.WR{Op: rdma.OpWrite, Inline: true, Local: []rdma.Seg{buf.mr.Seg(0, 8)}, Remote: buf.mr.Remote().At(2048)}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := a.Do(ctx, wr); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/write")
		})
	}
}

// BenchmarkWritePingPong measures what ib_write_lat reports: two sides
// RDMA-write 8 bytes to each other in turn, each spinning on its own memory
// for the peer's write (and, in manual mode, progressing its own CQ as
// perftest polls its own); the metric is half the round trip.
func BenchmarkWritePingPong(b *testing.B) {
	for _, m := range cqModes {
		b.Run("8B/"+m.name, func(b *testing.B) { benchPingPong(b, m.cfg) })
	}
}

func benchPingPong(b *testing.B, cfg rdma.CQConfig) {
	e := newEnv(b, cfg)
	cqb, err := e.d.NewCQ(cfg)
	if err != nil {
		b.Fatal(err)
	}
	qa, err := e.pd.NewQP(rdma.QPConfig{SendCQ: e.cq, GIDIndex: gidIndex(), MaxInline: 64})
	if err != nil {
		b.Fatal(err)
	}
	qb, err := e.pd.NewQP(rdma.QPConfig{SendCQ: cqb, GIDIndex: gidIndex(), MaxInline: 64})
	if err != nil {
		b.Fatal(err)
	}
	if err := qa.Connect(qb.Endpoint()); err != nil {
		b.Fatal(err)
	}
	if err := qb.Connect(qa.Endpoint()); err != nil {
		b.Fatal(err)
	}
	ma, mb := e.mem(b, 4096), e.mem(b, 4096)
	word := func(m *mem, off int) *uint64 { return (*uint64)(unsafe.Pointer(&m.b[off])) }
	// Each side sends from offset 0 of its own buffer and receives at 64.
	ping := rdma.WR{Op: rdma.OpWrite, Inline: true, Local: []rdma.Seg{ma.mr.Seg(0, 8)}, Remote: mb.mr.Remote().At(64)}
	pong := rdma.WR{Op: rdma.OpWrite, Inline: true, Local: []rdma.Seg{mb.mr.Seg(0, 8)}, Remote: ma.mr.Remote().At(64)}
	// idle is what a side does while it waits: progress its CQ (manual
	// mode) or let the CQ goroutines run (2 vCPUs).
	idle := func(cq *rdma.CQ) {
		if cq.Progress() == 0 {
			runtime.Gosched()
		}
	}
	n := uint64(b.N)
	var failed atomic.Value
	done := make(chan struct{})
	go func() { // the responder
		defer close(done)
		for i := uint64(1); i <= n; i++ {
			for atomic.LoadUint64(word(mb, 64)) != i {
				idle(cqb)
			}
			atomic.StoreUint64(word(mb, 0), i)
			if err := postRetry(qb, pong, cqb); err != nil {
				failed.Store(err)
				return
			}
		}
	}()
	rtt := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := uint64(1); i <= n; i++ {
		t0 := time.Now()
		atomic.StoreUint64(word(ma, 0), i)
		if err := postRetry(qa, ping, e.cq); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for atomic.LoadUint64(word(ma, 64)) != i {
			if f := failed.Load(); f != nil {
				b.Fatal(f)
			}
			if time.Now().After(deadline) {
				b.Fatalf("no pong %d", i)
			}
			idle(e.cq)
		}
		rtt = append(rtt, time.Since(t0))
	}
	b.StopTimer()
	<-done
	slices.Sort(rtt)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1e3, "us/half-rtt")
	b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/2/1e3, "us/half-rtt-p50")
}

// postRetry posts wr, retrying while the send queue is full of writes the
// CQ goroutine has not reaped yet.
func postRetry(qp *rdma.QP, wr rdma.WR, cq *rdma.CQ) error {
	wrs := []rdma.WR{wr}
	for {
		_, err := qp.Post(wrs)
		if err == nil || !errors.Is(err, rdma.ErrQueueFull) {
			return err
		}
		if cq.Progress() == 0 {
			time.Sleep(time.Microsecond)
		}
	}
}
