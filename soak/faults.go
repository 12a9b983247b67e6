package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/wire"
)

const maxFaults = 10_000_000 // bound on the scheduler's loop besides the duration

// schedule injects faults at random until the load phase ends: each kind
// runs beside the load, one of a kind at a time.
func (d *driver) schedule(skipped map[Fault]string) {
	rng := d.rng(1 << 20)
	var kinds []Fault
	for _, f := range d.cfg.Faults {
		if _, s := skipped[f]; !s {
			kinds = append(kinds, f)
		}
	}
	if len(kinds) == 0 {
		return
	}
	running := map[Fault]*atomic.Bool{}
	for _, k := range kinds {
		running[k] = &atomic.Bool{}
	}
	for range maxFaults {
		pause := time.Duration(rng.ExpFloat64() * float64(d.cfg.FaultEvery))
		if !d.sleep(min(pause, 5*d.cfg.FaultEvery)) {
			return
		}
		k := kinds[rng.IntN(len(kinds))]
		if !running[k].CompareAndSwap(false, true) {
			continue
		}
		r := d.rng(rng.Uint64())
		d.async.Add(1)
		go func() {
			defer d.async.Done()
			defer running[k].Store(false)
			d.inject(k, r)
		}()
	}
}

// sleep waits dt or until the load phase ends (false).
func (d *driver) sleep(dt time.Duration) bool {
	t := time.NewTimer(dt)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-d.loadCtx.Done():
		return false
	}
}

func (d *driver) livePeer(rng *rand.Rand) (*peerProc, peerView, bool) {
	if len(d.peers) == 0 {
		return nil, peerView{}, false
	}
	p := d.peers[rng.IntN(len(d.peers))]
	v := p.snapshot()
	return p, v, v.alive
}

func (d *driver) inject(k Fault, rng *rand.Rand) {
	switch k {
	case FaultCSHang, FaultCSAbort, FaultCSReset:
		d.csFault(k, rng)
	case FaultPeerKill:
		d.peerKill(rng)
	case FaultLinkDown:
		d.linkDown(rng)
	case FaultStaleKey:
		d.staleKey(rng)
	case FaultCloseLoad:
		d.closeUnderLoad(rng)
	case FaultHostile:
		d.hostile(rng)
	case FaultTimeout:
		d.timedOutCopy(rng)
	}
}

// csAfter is how long after a CS fault is cleared operations may still
// fail of it (the TDR, then the reset that aborts what is in flight and
// loses the device's buffers, until their holders replaced them).
const csAfter = 2*csTimeout + time.Second

// csFault hangs or aborts the next CS of a device (cleared 300 ms later
// if no CS took it), or resets it, here or in a peer. A hang the TDR
// ends, a reset (and on Gaudi3 an abort) make the driver reset the
// device: its buffers are lost. Here the workers replace theirs before
// their next operation (worker.ready); a peer replaces its exported
// ones by itself, and the driver takes their new keys (followPeer). The
// fault's window, on the target and on the device's own target, lasts
// until csAfter after both.
func (d *driver) csFault(k Fault, rng *rand.Rand) {
	op := map[Fault]string{FaultCSHang: "hang", FaultCSAbort: "abort", FaultCSReset: "reset"}[k]
	dev := rng.IntN(2)
	i := rng.IntN(len(d.peers) + 1)
	if i == len(d.peers) {
		df, ok := faultsOf(d.e, dev)
		if !ok {
			return
		}
		iv, ivd := d.self.begin(k), d.selfDev[dev].begin(k)
		switch op {
		case "hang":
			df.HangNextCS(1)
		case "abort":
			df.AbortNextCS(1)
		default:
			df.Reset()
		}
		d.t.inject(k)
		d.sleep(300 * time.Millisecond)
		df.HangNextCS(0)
		df.AbortNextCS(0)
		end := time.Now().Add(csAfter)
		iv.end(end)
		ivd.end(end)
		return
	}
	p := d.peers[i]
	v := p.snapshot()
	if !v.alive {
		return
	}
	iv, ivd := p.faults.begin(k), p.dev[dev].begin(k)
	if a, err := p.command(fmt.Sprintf("fault %s %d", op, dev)); err != nil || a != "OK" {
		if err == nil {
			d.t.note("peer %d refused a CS fault: %s", p.idx, a)
		}
		end := time.Now().Add(csAfter)
		iv.end(end)
		ivd.end(end)
		return
	}
	d.t.inject(k)
	d.sleep(300 * time.Millisecond)
	_, _ = p.command(fmt.Sprintf("fault clear %d", dev))
	// Following the peer takes a few seconds: beside the scheduler, so
	// that the kind can be injected again meanwhile.
	d.async.Add(1)
	go func() {
		defer d.async.Done()
		d.followPeer(p)
		end := time.Now().Add(csAfter)
		iv.end(end)
		ivd.end(end)
	}()
}

// followPeer takes peer p's keys while a reset that a CS fault of its
// may cause comes (a hung CS's TDR fires within the CS timeout of the
// fault's clearing) and the peer replaces the buffers it lost, then
// twice more, so that the peer learns the driver holds the new keys and
// frees the lost buffers. It follows whichever generation of the peer
// runs: a restart may have put the fault into the new one.
func (d *driver) followPeer(p *peerProc) {
	deadline := time.Now().Add(csTimeout + time.Second)
	late := 0 // polls after the deadline
	for {
		before := p.snapshot()
		if err := p.refreshKeys(); err != nil {
			// A peer that is being killed or started again answers nothing
			// (or is not the one asked): only a live one's bad answer is a
			// violation.
			if now := p.snapshot(); now.alive && now.gen == before.gen && !errors.Is(err, errPeerGone) {
				d.t.violate("peer-recovery", "peer %d gen %d: %v", p.idx, now.gen, err)
				return
			}
		}
		if time.Now().After(deadline) {
			if late++; late == 2 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// peerKill SIGKILLs a peer and starts it again. With two peers or more,
// the last one is never killed: its resources are checked against its
// start after the whole run (a leak per connection adds up there).
func (d *driver) peerKill(rng *rand.Rand) {
	n := len(d.peers)
	if n >= 2 {
		n--
	}
	p := d.peers[rng.IntN(n)]
	v := p.snapshot()
	if !v.alive {
		return
	}
	iv := p.faults.begin(FaultPeerKill)
	defer func() { iv.end(time.Now().Add(time.Second)) }()
	p.kill()
	_ = os.Remove(v.unix) // a killed listener leaves its socket file
	d.t.inject(FaultPeerKill)
	if d.loadCtx.Err() != nil {
		return
	}
	if err := p.start(v.gen+1, rng.Uint64()); err != nil {
		d.t.violate("peer-restart", "peer %d did not start again: %v", p.idx, err)
		return
	}
	d.t.restarts.Add(1)
}

// linkDown takes the veth of the peer in namespace A down for a while.
func (d *driver) linkDown(rng *rand.Rand) {
	p := d.peers[0]
	iv := p.faults.begin(FaultLinkDown)
	defer func() { iv.end(time.Now().Add(peerTimeout + 2*time.Second)) }()
	if err := d.ns.link(false); err != nil {
		d.t.note("link down: %v", err)
		return
	}
	d.t.inject(FaultLinkDown)
	d.sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(2*peerTimeout))))
	for try := 0; ; try++ {
		err := d.ns.link(true)
		if err == nil {
			return
		}
		if try == 5 {
			d.t.violate("link-up", "the veth did not come up again: %v", err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// staleKey: a peer allocates and exports a buffer, which we Put into
// (and try to write outside a narrowed view of, widenedKey); the peer
// frees it and allocates again at once; a Put or Get with the old key must
// then fail, and the new allocation must be untouched.
func (d *driver) staleKey(rng *rand.Rand) {
	p, v, ok := d.livePeer(rng)
	if !ok {
		return
	}
	tr := []string{"unix", "tcp"}[rng.IntN(2)]
	where := []string{"host", "gaudi"}[rng.IntN(2)]
	ep, err := d.dial(p, v, tr)
	if err != nil {
		return
	}
	defer ep.Close()
	h, err := d.e.Alloc(staleSize, engine.Host)
	if err != nil {
		d.t.violate("alloc", "host buffer: %v", err)
		return
	}
	defer h.Free()
	a, err := p.command("salloc " + where)
	if err != nil || !strings.HasPrefix(a, "KEY ") {
		return // the peer is gone (killed meanwhile) or refused: nothing to test
	}
	key, err := parseKey(strings.TrimPrefix(a, "KEY "))
	if err != nil {
		d.t.violate("stale-key", "peer %d sent a bad key: %v", p.idx, err)
		return
	}
	ctx := context.Background()
	seed := rng.Uint64()
	n := 1 + rng.IntN(staleSize)
	what := func() string {
		return fmt.Sprintf("peer %d gen %d %s, %s allocation, %d bytes, run seed %d", p.idx, v.gen, tr, where, n, d.cfg.Seed)
	}
	rdev := -1
	if where == "gaudi" {
		rdev = staleDevice
	}
	// Used once while valid (over unix this maps it here).
	fill(h.Bytes()[:n], seed, 0)
	probeStart := time.Now()
	start := time.Now()
	err = d.wait(ep.Put(ctx, h.Slice(0, n), key.Slice(0, n)), what)
	d.result("stale/valid-put/"+tr, err, start, what, d.remoteTargets(p, rdev)...)
	if err != nil {
		_, _ = p.command(fmt.Sprintf("sfree %d", seed))
		_, _ = p.command("check")
		return
	}
	d.widenedKey(ep, h, key, tr, what)
	if a, err := p.command(fmt.Sprintf("sfree %d", seed^1)); err != nil || a != "FREED" {
		return
	}
	d.t.inject(FaultStaleKey)
	fill(h.Bytes()[:n], seed^2, 0)
	err = d.wait(ep.Put(ctx, h.Slice(0, n), key.Slice(0, n)), what)
	d.t.op("stale/put/"+tr+"/"+where, err)
	d.staleResult("Put", err, what)
	err = d.wait(ep.Get(ctx, h.Slice(0, n), key.Slice(0, n)), what)
	d.t.op("stale/get/"+tr+"/"+where, err)
	d.staleResult("Get", err, what)
	a, err = p.command("check")
	switch {
	case err != nil, a == "OK":
	case strings.HasPrefix(a, "LOST ") && rdev >= 0 && p.dev[rdev].explains(probeStart, time.Now()):
		// The canary's device was reset: its contents are gone, there
		// is nothing to check.
		d.t.opClass("stale/canary-lost", "")
	default:
		d.t.violate("stale-canary", "%s: %s", what(), a)
	}
}

func (d *driver) staleResult(op string, err error, what func() string) {
	switch {
	case err == nil:
		d.t.violate("stale-success", "%s with a key whose allocation the owner had freed (and allocated again) returned success (%s)", op, what())
	case mustNot[classify(err)] && classify(err) != "ErrInvalid" && classify(err) != "ErrFreed":
		d.t.violate("bad-error", "%s with a stale key (%s): %s error: %v", op, what(), classify(err), err)
	}
}

// closeUnderLoad closes an engine while goroutines copy through it (host
// to host inline and on workers, batches, Gaudi to host): every copy must
// end, a success must have moved the right bytes, a failure must be
// ErrClosed (or the device's abort of what was in flight).
func (d *driver) closeUnderLoad(rng *rand.Rand) {
	e, err := engine.New(engineConfig(1, d.log))
	if err != nil {
		d.t.violate("close-load", "engine: %v", err)
		return
	}
	closed := false
	defer func() {
		if !closed {
			_ = e.Close()
		}
	}()
	size := 4 * d.cfg.MaxOp
	src, err := e.Alloc(size, engine.Host)
	if err != nil {
		d.t.violate("close-load", "alloc: %v", err)
		return
	}
	dev, err := e.Alloc(size, engine.Gaudi(0))
	if err != nil {
		d.t.violate("close-load", "alloc: %v", err)
		return
	}
	seed := rng.Uint64()
	fill(src.Bytes(), seed, 0)
	if err := e.CopySync(context.Background(), dev.All(), src.All()); err != nil {
		d.t.violate("close-load", "fill the Gaudi buffer: %v", err)
		return
	}
	d.t.inject(FaultCloseLoad)
	what := func() string { return fmt.Sprintf("close under load, seed %#x", seed) }
	var wg sync.WaitGroup
	for g := range 4 {
		r := d.rng(rng.Uint64())
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.closeLoad(e, src, dev, g, seed, r, what)
		}()
	}
	d.sleep(time.Duration(2+rng.IntN(150)) * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- e.Close() }()
	select {
	case err = <-done:
	case <-time.After(d.cfg.Bound):
		d.t.violate("close-load", "Engine.Close under load did not return in %v", d.cfg.Bound)
		err = <-done
	}
	closed = true
	if err != nil {
		d.t.note("Close under load: %v", err)
	}
	wg.Wait()
	if err := e.Close(); err != nil {
		d.t.violate("close-load", "a second Close returned %v (Close is idempotent)", err)
	}
}

func (d *driver) closeLoad(e *engine.Engine, src, dev *engine.Buffer, g int, seed uint64, rng *rand.Rand, what func() string) {
	size := src.Size()
	mem := make([]byte, size)
	reg, err := e.Register(mem)
	if err != nil {
		d.t.op("closeload/register", err)
		return
	}
	ctx := context.Background()
	for range 100_000 {
		n := 1 + rng.IntN(min(size, 1<<(1+rng.IntN(bitsLen(size)))))
		off := rng.IntN(size - n + 1)
		clear(mem[:n])
		var (
			f    *engine.Future
			kind string
		)
		switch rng.IntN(4) {
		case 0, 1:
			kind = "closeload/h2h"
			f = e.Copy(ctx, reg.Slice(0, n), src.Slice(off, n))
		case 2:
			if n < 2 {
				continue
			}
			kind = "closeload/batch"
			b := e.NewBatch()
			half := n / 2
			b.Copy(reg.Slice(0, half), src.Slice(off, half))
			b.Copy(reg.Slice(half, n-half), src.Slice(off+half, n-half))
			f = b.Submit(ctx)
		default:
			kind = "closeload/d2h"
			f = e.Copy(ctx, reg.Slice(0, n), dev.Slice(off, n))
		}
		err := d.wait(f, what)
		d.t.op(kind, err)
		if err == nil {
			if i := check(mem[:n], seed, off); i >= 0 {
				d.t.violate("wrong-bytes", "%s (%s, goroutine %d, offset %d, %d bytes): byte %d differs after success", kind, what(), g, off, n, i)
				return
			}
			d.t.bytes.Add(uint64(n))
			continue
		}
		switch classify(err) {
		case "ErrClosed":
			return
		case "ErrAborted", "ErrTimeout", "ErrFreed":
			// the device's end of what was in flight at Close; a
			// buffer Close released
		default:
			if err != errUnresolved {
				d.t.violate("bad-error", "%s (%s) during Close: %s error: %v", kind, what(), classify(err), err)
			}
			return
		}
	}
}

// widenedKey narrows a valid key with Slice, re-encodes it wider (its view,
// then its grant too) and writes through it: the owner must refuse, since
// a key grants its view only.
func (d *driver) widenedKey(ep *engine.Endpoint, h *engine.Buffer, key engine.RemoteKey, tr string, what func() string) {
	if key.Len() < 3*4096 {
		return
	}
	narrow := key.Slice(4096, 4096)
	for _, edit := range []string{"view", "grant"} {
		var wk wire.RemoteKey
		if err := wk.UnmarshalBinary(narrow.Bytes()); err != nil {
			d.t.violate("widened-key", "a narrowed key does not decode: %v", err)
			return
		}
		wk.Offset, wk.Len = 0, wk.Length
		if edit == "grant" {
			wk.GrantOffset, wk.GrantLen = 0, wk.Length
		}
		b, err := wk.MarshalBinary()
		if err != nil {
			d.t.op("widened-key/refused-by-encoder-"+edit, nil) // refused before it is sent: fine
			continue
		}
		forged, err := engine.ParseRemoteKey(b)
		if err != nil {
			d.t.op("widened-key/refused-by-parser-"+edit, nil)
			continue
		}
		n := min(forged.Len(), 4096)
		fill(h.Bytes()[:n], 0x5eed, 0)
		err = d.wait(ep.Put(context.Background(), h.Slice(0, n), forged.Slice(0, n)), what)
		d.t.op("widened-key/put-"+edit+"/"+tr, err)
		if err == nil {
			landed := "not checked"
			back, aerr := d.e.Alloc(n, engine.Host)
			if aerr == nil {
				if gerr := d.wait(ep.Get(context.Background(), back.All(), key.Slice(0, n)), what); gerr == nil {
					landed = fmt.Sprintf("the bytes landed at offset 0: %v", check(back.Bytes(), 0x5eed, 0) < 0)
				}
				_ = back.Free()
			}
			d.t.violate("widened-key", "a key narrowed with Slice to [4096, +4096) and re-encoded with its %s widened to the whole allocation (MAC unchanged) was accepted for a write at offset 0; %s (%s)", edit, landed, what())
		}
	}
}
