package soak

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// hostile opens raw connections to the peers' listeners for 1 to 3 s, at
// about 200 a second (at most 400 open at once): some send garbage, some
// nothing, some only a Hello and then heartbeats; each is held up to 6 s.
// Legitimate Dials meanwhile must keep succeeding (Run checks 99%).
func (d *driver) hostile(rng *mrand.Rand) {
	const (
		rate    = 200
		maxOpen = 400
	)
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxOpen)
	d.t.inject(FaultHostile)
	end := time.Now().Add(time.Second + time.Duration(rng.Int64N(int64(2*time.Second))))
	tk := time.NewTicker(time.Second / rate)
	defer tk.Stop()
	for i := 0; i < 3*rate && time.Now().Before(end); i++ {
		select {
		case <-d.loadCtx.Done():
			i = 3 * rate
			continue
		case <-tk.C:
		}
		p, v, ok := d.livePeer(rng)
		if !ok {
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // enough open
		}
		kind, unixSock := rng.IntN(3), rng.IntN(2) == 0
		hold := 500*time.Millisecond + time.Duration(rng.Int64N(int64(5500*time.Millisecond)))
		junk := make([]byte, 1+rng.IntN(4096))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d.hostileConn(p, v, kind, unixSock, hold, junk)
		}()
	}
	wg.Wait()
}

func (d *driver) hostileConn(p *peerProc, v peerView, kind int, unixSock bool, hold time.Duration, junk []byte) {
	var (
		c   net.Conn
		err error
	)
	switch {
	case unixSock:
		c, err = net.DialTimeout("unixpacket", v.unix, 2*time.Second)
	case p.inNS:
		if nerr := d.ns.inB(func() { c, err = net.DialTimeout("tcp", v.tcp, 2*time.Second) }); nerr != nil {
			err = nerr
		}
	default:
		c, err = net.DialTimeout("tcp", v.tcp, 2*time.Second)
	}
	if err != nil {
		return // refused: fine
	}
	d.t.hostile.Add(1)
	defer c.Close()
	send := func(m wire.Message) error {
		frame, err := wire.AppendFrame(nil, m)
		if err != nil {
			return err
		}
		if unixSock {
			_, err = c.Write(frame)
			return err
		}
		return wire.NewStreamTransport(c).Send(frame, nil)
	}
	// Drain what the listener sends (a HelloAck, an Error).
	go func() {
		b := make([]byte, 64<<10)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
		}
	}()
	var beat <-chan time.Time
	switch kind {
	case 0: // garbage, half of the time behind a valid frame header
		_, _ = rand.Read(junk)
		if len(junk) >= 8 && junk[0]&1 == 0 {
			if f, err := wire.AppendFrame(nil, &wire.Bye{}); err == nil {
				copy(junk, f[:min(len(f), 8)])
			}
		}
		_, _ = c.Write(junk)
	case 1: // silent
	case 2: // a Hello, then only heartbeats
		if err := send(hostileHello(unixSock)); err != nil {
			return
		}
		tk := time.NewTicker(500 * time.Millisecond)
		defer tk.Stop()
		beat = tk.C
	}
	deadline := time.NewTimer(hold)
	defer deadline.Stop()
	for {
		select {
		case <-deadline.C:
			return
		case <-d.loadCtx.Done():
			return
		case <-beat:
			if send(&wire.Heartbeat{}) != nil {
				return
			}
		}
	}
}

// hostileHello is a Hello as a real engine of this process would send it.
func hostileHello(unixSock bool) *wire.Hello {
	h := &wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MinVersion, PID: uint32(os.Getpid()),
		UID: uint32(os.Getuid()), Name: "gxfer-soak-hostile", Caps: wire.CapHeartbeat | wire.CapInlineData}
	if unixSock {
		h.Caps = wire.CapHeartbeat | wire.CapFDPassing
	}
	if ns, err := ipc.PIDNamespace(); err == nil {
		h.PIDNamespace = ns
	}
	_, _ = rand.Read(h.EngineID[:])
	return h
}

// timedOutCopy: with D2H work queued on Gaudi 0, a Gaudi 1 <- Gaudi 0 copy
// (staged through internal host buffers) gets a deadline of a few
// milliseconds. Host buffers allocated right after it times out must not
// receive its data when the queued DMA runs late.
func (d *driver) timedOutCopy(rng *mrand.Rand) {
	const (
		chunk   = 4 << 20
		queued  = 4
		canarys = 16
	)
	ctx := context.Background()
	var bufs []*engine.Buffer
	defer func() {
		for _, b := range bufs {
			_ = b.Free()
		}
	}()
	// After a reset of a device, its buffers are allocated in its new
	// context; an allocation that a reset fails meanwhile is explained
	// by the device's CS fault window.
	for dev := range 2 {
		wctx, cancel := context.WithTimeout(ctx, d.cfg.Bound)
		err := d.e.WaitDevice(wctx, dev)
		cancel()
		if err != nil {
			d.t.violate("recover", "timed-out copy: gaudi%d not usable within %v: %v", dev, d.cfg.Bound, err)
			return
		}
	}
	alloc := func(n int, loc engine.Location) *engine.Buffer {
		start := time.Now()
		b, err := d.e.Alloc(n, loc)
		if err != nil {
			if loc.IsGaudi() && errors.Is(err, engine.ErrDeviceLost) {
				d.result("alloc/gaudi", err, start, func() string { return fmt.Sprintf("%s %d bytes", loc, n) }, d.devTarget(loc.Device()))
				return nil
			}
			d.t.violate("alloc", "%s %d bytes: %v", loc, n, err)
			return nil
		}
		bufs = append(bufs, b)
		return b
	}
	big, hostDst, src, dst, pat := alloc(4*chunk, engine.Gaudi(0)), alloc(4*chunk, engine.Host),
		alloc(chunk, engine.Gaudi(0)), alloc(chunk, engine.Gaudi(1)), alloc(chunk, engine.Host)
	if big == nil || hostDst == nil || src == nil || dst == nil || pat == nil {
		return
	}
	seed := rng.Uint64()
	fill(pat.Bytes(), seed, 0)
	what := func() string { return fmt.Sprintf("timed-out gaudi1<-gaudi0 copy, seed %#x", seed) }
	g0, g1 := d.devTarget(0), d.devTarget(1)
	start := time.Now()
	err := d.wait(d.e.Copy(ctx, src.All(), pat.All()), what)
	d.result("copy/h2d", err, start, what, d.self, g0)
	if err != nil {
		return
	}
	var load []*engine.Future
	for i := range queued {
		load = append(load, d.e.Copy(ctx, hostDst.Slice(i*chunk, chunk), big.Slice(i*chunk, chunk)))
	}
	d.t.inject(FaultTimeout)
	start = time.Now()
	err = d.wait(d.e.Copy(ctx, dst.All(), src.All(), engine.Timeout(time.Duration(1+rng.IntN(4))*time.Millisecond)), what)
	d.timeoutResult(err, start, what, d.self, g0, g1)
	var canaries []*engine.Buffer
	for range canarys {
		c := alloc(chunk, engine.Host)
		if c == nil {
			break
		}
		if i := nonZero(c.Bytes()); i >= 0 {
			clear(c.Bytes())
		}
		canaries = append(canaries, c)
	}
	for _, f := range load {
		err := d.wait(f, what)
		d.result("copy/d2h", err, start, what, d.self, g0)
	}
	time.Sleep(2 * csTimeout) // what the timed-out copy left queued runs meanwhile
	for i, c := range canaries {
		if j := nonZero(c.Bytes()); j >= 0 {
			b := c.Bytes()
			origin := "not the copy's data"
			if a := j &^ 7; a+8 <= len(b) {
				if k := findWord(seed, binary.LittleEndian.Uint64(b[a:]), chunk/8); k >= 0 {
					origin = fmt.Sprintf("the copy's source bytes from offset %d", 8*k)
				}
			}
			d.t.violate("late-dma", "%s: host buffer %d, allocated after the copy timed out, was written at byte %d: %s",
				what(), i, j, origin)
		}
	}
}

// timeoutResult counts the copy given a short Timeout, once: a success
// or ErrTimeout as such, any other failure checked as every operation's
// is (typed, explained by a fault in what it touches).
func (d *driver) timeoutResult(err error, start time.Time, what func() string, targets ...*target) {
	if err == nil || classify(err) == "ErrTimeout" {
		d.t.op("timeout/d2d", err)
		return
	}
	d.result("timeout/d2d", err, start, what, targets...)
}
