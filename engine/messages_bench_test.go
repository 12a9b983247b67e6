package engine

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchPair is two engines connected by one endpoint over network.
func benchPair(b *testing.B, network string) (a, o *Engine, ab, ba *Endpoint) {
	b.Helper()
	a, o = newEngine(b, Config{Transport: TransportTCP}), newEngine(b, Config{Transport: TransportTCP})
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(b.TempDir(), "s.sock")
	}
	if network == "rdma" {
		needRDMA(b)
		a, o = newRDMAEngine(b), newRDMAEngine(b)
		network = "tcp"
	}
	l, err := o.Listen(network, addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	if ab, err = a.Dial(ctx, network, l.Addr()); err != nil {
		b.Fatal(err)
	}
	if ba, err = l.Accept(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ab.Close(); _ = ba.Close() })
	return a, o, ab, ba
}

// BenchmarkNotify: the latency of a notification after data, one way, on
// each transport: put8-us is an 8-byte PutSync; msg-us half the round
// trip of an 8-byte message answered by one; notify-us is an 8-byte Put
// then a Send until the target took the message (the round trip with the
// answer, less msg-us); ratio is notify-us over put8-us; bells/msg (unix)
// the share of messages that found their receiver parked.
func BenchmarkNotify(b *testing.B) {
	for _, network := range []string{"unix", "tcp", "rdma"} {
		b.Run(network, func(b *testing.B) {
			a, o, ab, ba := benchPair(b, network)
			ctx := context.Background()
			src, _ := a.Alloc(8, Host)
			rb, _ := o.Alloc(8, Host)
			rk, err := rb.Export()
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan struct{})
			defer close(done)
			go func() { // the target: answers each message
				for {
					if _, err := ba.Recv(ctx); err != nil {
						return
					}
					if err := ba.Send(ctx, []byte("ack")); err != nil {
						return
					}
				}
			}()
			msg := []byte("notify!!")
			pingPong := func(put bool) error {
				if put {
					if err := ab.PutSync(ctx, src.All(), rk); err != nil {
						return err
					}
				}
				if err := ab.Send(ctx, msg); err != nil {
					return err
				}
				_, err := ab.Recv(ctx)
				return err
			}
			var tPut, tMsg, tNotify time.Duration
			n := 0
			for b.Loop() {
				t0 := time.Now()
				if err := ab.PutSync(ctx, src.All(), rk); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := pingPong(false); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				if err := pingPong(true); err != nil {
					b.Fatal(err)
				}
				tPut += t1.Sub(t0)
				tMsg += t2.Sub(t1)
				tNotify += time.Since(t2)
				n++
			}
			us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
			put8, oneWay := us(tPut), us(tMsg)/2
			notify := us(tNotify) - oneWay
			b.ReportMetric(put8, "put8-us")
			b.ReportMetric(oneWay, "msg-us")
			b.ReportMetric(notify, "notify-us")
			b.ReportMetric(notify/put8, "ratio")
			// unix: the share of messages whose receiver had parked (a
			// MsgBell on the socket woke it; the others it found polling).
			if out := ab.ch.MsgStats().Out + ba.ch.MsgStats().Out; out > 0 {
				b.ReportMetric(float64(ab.ch.MsgStats().Bells+ba.ch.MsgStats().Bells)/float64(out), "bells/msg")
			}
		})
	}
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMsgIdleCPU: the CPU an idle unix endpoint costs, from
// getrusage over a few seconds (the whole process: two engines, one
// endpoint): idle-cpu-% with nothing waiting, recv-cpu-% while a Recv
// waits for a message that does not come (it polls the ring for WaitSpin,
// then parks: it must not keep a core busy). Run with -benchtime 1x.
func BenchmarkMsgIdleCPU(b *testing.B) {
	const idle = 3 * time.Second
	_, _, ab, ba := benchPair(b, "unix")
	ctx := context.Background()
	// One message each way first: the rings are set up.
	if err := ab.Send(ctx, []byte("x")); err != nil {
		b.Fatal(err)
	}
	if _, err := ba.Recv(ctx); err != nil {
		b.Fatal(err)
	}
	if !ab.ch.MsgRing() {
		b.Fatal("the unix endpoint does not use the ring")
	}
	var quiet, waiting time.Duration
	for b.Loop() {
		c0 := cpuTime(b)
		time.Sleep(idle)
		c1 := cpuTime(b)
		rctx, cancel := context.WithTimeout(ctx, idle)
		_, err := ba.Recv(rctx)
		cancel()
		if !errors.Is(err, ErrTimeout) {
			b.Fatalf("Recv: %v, want a timeout", err)
		}
		quiet += c1 - c0
		waiting += cpuTime(b) - c1
	}
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / (float64(b.N) * idle.Seconds()) }
	b.ReportMetric(pct(quiet), "idle-cpu-%")
	b.ReportMetric(pct(waiting), "recv-cpu-%")
}
