package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/engine"
)

// driver is one soak run in the driving process.
type driver struct {
	cfg          Config
	t            *tally
	log          zerolog.Logger
	dir          string
	e            *engine.Engine
	self         *target    // faults on this process's devices
	selfDev      [2]*target // CS faults on each of them (what a device reset explains)
	peers        []*peerProc
	ns           *netns
	slotsPerPeer int
	devFaults    bool

	loadCtx  context.Context
	stopping atomic.Bool
	bg       sync.WaitGroup // peer waiters
	async    sync.WaitGroup // faults running beside the load
}

// Run runs a soak: it starts the peers, runs the load with faults for
// cfg.Duration, stops everything and checks resources. Its error is a
// setup failure; what the soak found is in the Report (Report.OK).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	base := measure()
	d := &driver{cfg: cfg, t: newTally(), log: cfg.Logger, self: &target{name: "this process's devices"}}
	for i := range d.selfDev {
		d.selfDev[i] = &target{name: fmt.Sprintf("this process's gaudi%d", i), dev: localDev}
	}
	rep := &Report{Seed: cfg.Seed, Procs: cfg.Procs, Skipped: map[Fault]string{}, Baseline: base}
	var err error
	if d.dir, err = os.MkdirTemp("", "gxfer-soak-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(d.dir)

	rep.Netns = "off"
	if cfg.Netns != "off" && cfg.Procs > 0 {
		ns, why := setupNetns(cfg.Seed)
		switch {
		case ns != nil:
			d.ns = ns
			rep.Netns = fmt.Sprintf("used (peer 0 in %s at %s, dialed from %s)", ns.a, ns.addrA, ns.b)
			defer ns.teardown()
		case cfg.Netns == "on":
			return nil, fmt.Errorf("soak: netns: %s", why)
		default:
			rep.Netns = "not used: " + why
		}
	}
	if d.ns == nil && cfg.wants(FaultLinkDown) {
		rep.Skipped[FaultLinkDown] = "needs the network namespaces (" + rep.Netns + ")"
	}

	if d.e, err = engine.New(engineConfig(2, d.log)); err != nil {
		return nil, fmt.Errorf("soak: engine: %w", err)
	}
	engineOpen := true
	defer func() {
		if engineOpen {
			_ = d.e.Close()
		}
	}()
	if cfg.OnEngine != nil {
		cfg.OnEngine(d.e)
	}
	if why := csFaultsWhyNot(d.e); why != "" {
		for _, f := range []Fault{FaultCSHang, FaultCSAbort, FaultCSReset} {
			if cfg.wants(f) {
				rep.Skipped[f] = why
			}
		}
	} else {
		d.devFaults = true
	}
	if cfg.Procs == 0 {
		for _, f := range []Fault{FaultPeerKill, FaultStaleKey, FaultHostile} {
			if cfg.wants(f) {
				rep.Skipped[f] = "no peer processes"
			}
		}
	}

	d.slotsPerPeer = cfg.Workers * slotsPerWorker
	for i := range cfg.Procs {
		p := &peerProc{d: d, idx: i, inNS: d.ns != nil && i == 0, faults: &target{name: fmt.Sprintf("peer %d", i)}}
		for j := range p.dev {
			p.dev[j] = &target{name: fmt.Sprintf("peer %d gaudi%d", i, j), dev: peerDev}
		}
		d.peers = append(d.peers, p)
		if err := p.start(0, uint64(cfg.Seed)^uint64(i+1)<<40); err != nil {
			d.stopAll()
			return nil, fmt.Errorf("soak: %w", err)
		}
	}

	// The load phase.
	loadCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	d.loadCtx = loadCtx
	t0 := time.Now()
	var wg sync.WaitGroup
	workers := make([]*worker, cfg.Workers)
	for i := range workers {
		w, err := d.newWorker(i)
		if err != nil {
			cancel()
			wg.Wait()
			d.stopAll()
			return nil, fmt.Errorf("soak: worker: %w", err)
		}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run()
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.schedule(rep.Skipped)
	}()
	if cfg.Progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.progress(t0)
		}()
	}
	stuck := d.watchdog(loadCtx, 20*time.Second)
	wg.Wait()
	d.async.Wait()
	close(stuck)
	rep.Duration = time.Since(t0)
	ours := memfdInodes() // this process's shared memory, which peers may have mapped
	for _, w := range workers {
		w.close()
	}

	// Everything stops; resources go back to their baselines.
	if err := d.e.Close(); err != nil {
		d.t.note("closing the engine: %v", err)
	}
	engineOpen = false
	peerLeaks := make([][]string, len(d.peers))
	var pwg sync.WaitGroup
	for i, p := range d.peers {
		if !p.snapshot().alive {
			continue
		}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			p.mu.Lock()
			pb := p.base
			p.mu.Unlock()
			now, l := settle(fmt.Sprintf("peer %d", p.idx), pb, peerSlack, 20*time.Second, p.stats)
			if len(l) > 0 && now.FDs > pb.FDs {
				fds := p.newFDs()
				l = append(l, fmt.Sprintf("peer %d: descriptors opened since its start: %s", p.idx, strings.Join(fds, " ")))
				var imported []string
				for _, f := range fds {
					var ino uint64
					if i := strings.LastIndexByte(f, '@'); i >= 0 {
						if _, err := fmt.Sscan(f[i+1:], &ino); err == nil && ours[ino] {
							imported = append(imported, f)
						}
					}
				}
				if len(imported) > 0 {
					l = append(l, fmt.Sprintf("peer %d still holds memory of this process, whose engine is closed: %s", p.idx, strings.Join(imported, " ")))
				}
			}
			peerLeaks[i] = l
		}()
	}
	pwg.Wait()
	for _, l := range peerLeaks {
		rep.Leaks = append(rep.Leaks, l...)
	}
	d.stopAll()
	rep.Final, rep.Leaks = settleAppend(rep.Leaks, base)
	d.t.fill(rep)
	if n := rep.DialsOK + rep.DialsFailed; rep.DialsFailed*100 > n {
		rep.Violations = append(rep.Violations, fmt.Sprintf("lockout: %d of %d legitimate Dials to live peers failed (more than 1%%)", rep.DialsFailed, n))
	}
	return rep, nil
}

// watchdog notes (with every goroutine's stack, on stderr) a load that
// has not stopped within grace of its end: each of its steps is bounded,
// so that is a bug of the soak or an engine call that blocks.
func (d *driver) watchdog(loadCtx context.Context, grace time.Duration) chan struct{} {
	done := make(chan struct{})
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		select {
		case <-done:
			return
		case <-loadCtx.Done():
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			buf := make([]byte, 4<<20)
			buf = buf[:runtime.Stack(buf, true)]
			d.t.note("the load had not stopped %v after its end; goroutine stacks on stderr", grace)
			fmt.Fprintf(os.Stderr, "gxfer soak: the load has not stopped %v after its end:\n%s\n", grace, buf)
		}
	}()
	return done
}

func settleAppend(l []string, base Resources) (Resources, []string) {
	now, more := settle("this process", base, driverSlack, 20*time.Second, func() (Resources, error) { return measure(), nil })
	return now, append(l, more...)
}

// stopAll ends the peer processes.
func (d *driver) stopAll() {
	d.stopping.Store(true)
	var wg sync.WaitGroup
	for _, p := range d.peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(20 * time.Second)
		}()
	}
	wg.Wait()
	d.bg.Wait()
}

func (d *driver) progress(t0 time.Time) {
	tk := time.NewTicker(d.cfg.ProgressEvery)
	defer tk.Stop()
	for {
		select {
		case <-d.loadCtx.Done():
			return
		case <-tk.C:
		}
		var ok, failed uint64
		d.t.mu.Lock()
		for _, c := range d.t.ops {
			ok += c.OK
			for _, n := range c.Failed {
				failed += n
			}
		}
		nf := 0
		for _, n := range d.t.injected {
			nf += n
		}
		nv := len(d.t.violations)
		d.t.mu.Unlock()
		d.cfg.Progress(fmt.Sprintf("soak %v: %d ops ok, %d failed, %.1f MiB verified, %d faults, %d violations",
			time.Since(t0).Round(time.Second), ok, failed, float64(d.t.bytes.Load())/(1<<20), nf, nv))
	}
}

// target is something faults are injected into (this process's devices,
// a peer): the times during which a failure of an operation touching it
// is explained.
type target struct {
	name string
	// dev marks the target of one device's CS faults: a lost device
	// (ErrDeviceLost here, classPeerDeviceLost from a peer) is explained
	// only by such a target, of the device the operation touched.
	dev devScope
	mu  sync.Mutex
	iv  []*interval
}

// devScope says whose device a target's CS faults are on, if any.
type devScope uint8

const (
	notDev   devScope = iota
	localDev          // one of this process's devices
	peerDev           // one of a peer's devices
)

// admits reports whether a fault of t may explain an error of class cls.
func (t *target) admits(cls string) bool {
	switch cls {
	case "ErrDeviceLost":
		return t.dev == localDev
	case classPeerDeviceLost:
		return t.dev == peerDev
	}
	return true
}

type interval struct {
	from time.Time
	to   atomic.Int64 // unix nanoseconds; 0 while open
	kind Fault
}

// begin opens an interval; end closes it.
func (t *target) begin(kind Fault) *interval {
	iv := &interval{from: time.Now(), kind: kind}
	t.mu.Lock()
	t.iv = append(t.iv, iv)
	if len(t.iv) > 512 {
		t.iv = t.iv[len(t.iv)-512:]
	}
	t.mu.Unlock()
	return iv
}

func (iv *interval) end(at time.Time) { iv.to.Store(at.UnixNano()) }

// explains reports whether a fault's interval overlaps [start, end].
func (t *target) explains(start, end time.Time) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, iv := range t.iv {
		to := iv.to.Load()
		if iv.from.After(end) {
			continue
		}
		if to == 0 || time.Unix(0, to).After(start) {
			return true
		}
	}
	return false
}

// mustNot are error classes no operation of the load may end with: a
// panic, an untyped error, one saying the soak's own valid arguments
// were wrong, or a device out of memory (the soak's buffers fit: a leak).
var mustNot = map[string]bool{"ErrPanic": true, "untyped": true, "ErrInvalid": true, "ErrForeign": true,
	"ErrNoDevice": true, "ErrNotSupported": true, "ErrFreed": true, "ErrQueueFull": true, "ErrNoMemory": true}

var errUnresolved = errors.New("soak: future not resolved")

// wait waits for f within the bound; a future past it is a violation
// (and is waited for once more as long before being given up).
// future is what wait needs of an *engine.Future (a fake in tests: only
// the engine completes its futures).
type future interface {
	Done() <-chan struct{}
	Err() error
}

func (d *driver) wait(f future, what func() string) error {
	t := time.NewTimer(d.cfg.Bound)
	defer t.Stop()
	select {
	case <-f.Done():
		return f.Err()
	case <-t.C:
	}
	d.t.violate("unresolved", "%s: future not resolved after %v", what(), d.cfg.Bound)
	t.Reset(d.cfg.Bound)
	select {
	case <-f.Done():
		return f.Err()
	case <-t.C:
		return errUnresolved
	}
}

// result counts an operation and checks its error: typed, and explained
// by a fault on one of the targets it touched.
func (d *driver) result(kind string, err error, start time.Time, what func() string, targets ...*target) {
	d.t.op(kind, err)
	if err == nil || errors.Is(err, errUnresolved) {
		return
	}
	cls := classify(err)
	if mustNot[cls] {
		d.t.violate("bad-error", "%s (%s): %s error: %v", kind, what(), cls, err)
		return
	}
	end := time.Now()
	for _, t := range targets {
		if t.admits(cls) && t.explains(start, end) {
			return
		}
	}
	if cls == "ErrDeviceLost" || cls == classPeerDeviceLost {
		d.t.violate("unexplained", "%s (%s) failed with a lost device outside a CS fault window of a device it touches: %v", kind, what(), err)
		return
	}
	d.t.violate("unexplained", "%s (%s) failed with no fault injected into what it touches: %v", kind, what(), err)
}

// classSuperseded counts a refusal of a peer's key that a reset of the
// peer's device replaced (see remoteResult).
const classSuperseded = "ErrInvalid/superseded-key"

// remoteResult is result for an operation on a peer's buffer named by a
// key of view v on the peer's device rdev (-1: host memory). When a
// reset of that device lost the buffer, the peer exports a new one
// (a new key generation, which the driver takes before the peer frees
// the lost buffer): an operation that still used the old key may then
// be refused as stale (ErrInvalid). That refusal is explained if the
// driver has the newer key and the device's CS fault window covers the
// operation; any other ErrInvalid remains a violation.
func (d *driver) remoteResult(kind string, err error, start time.Time, what func() string, p *peerProc, v peerView, rdev int, targets ...*target) {
	if err != nil && rdev >= 0 && staleRefusal(err) {
		now := p.snapshot()
		if now.gen == v.gen && now.kgen[rdev] > v.kgen[rdev] {
			d.t.opClass(kind, classSuperseded)
			if !p.dev[rdev].explains(start, time.Now()) {
				d.t.violate("unexplained", "%s (%s): a key of peer %d gaudi%d (generation %d) that a device reset superseded was refused outside the device's CS fault window: %v",
					kind, what(), p.idx, rdev, v.kgen[rdev], err)
			}
			return
		}
	}
	d.result(kind, err, start, what, targets...)
}

// rng returns a source for a goroutine of the run.
func (d *driver) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(d.cfg.Seed), stream))
}
