package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gxfer/gxfer/engine"
)

// worker is one load goroutine of the driver: it moves verified data
// between this process's memory and the peers', and within this process.
type worker struct {
	d     *driver
	id    int
	rng   *rand.Rand
	eps   map[epKey]*wep
	srcH  *engine.Buffer // host: patterns are written here
	backH *engine.Buffer // host: data read back is checked here
	dev   *devBuf        // on Gaudi(id%2)
	dev2  *devBuf        // on the other Gaudi
	bufs  []*engine.Buffer
	// retired[peer][rw host/gaudi][slot]: until when the slot is not
	// used (a failed operation may still write it).
	retired map[[3]int]time.Time
	ops     int
}

type epKey struct {
	peer int
	tr   string
}

type wep struct {
	ep  *engine.Endpoint
	gen int
}

const (
	maxOpsPerWorker = 50_000_000 // bound on a worker's loop besides the duration
	dialTimeout     = 10 * time.Second
)

// devBuf is a buffer on one of this process's devices, and the
// generation of the device's context it was allocated in.
type devBuf struct {
	b      *engine.Buffer
	dev    int
	size   int
	resets int  // DeviceInfo.Resets before the allocation
	lost   bool // an operation with it ended with ErrDeviceLost
}

func (d *driver) newWorker(id int) (*worker, error) {
	w := &worker{d: d, id: id, rng: d.rng(uint64(id) + 1), eps: map[epKey]*wep{}, retired: map[[3]int]time.Time{}}
	n := 4 * d.cfg.MaxOp
	for _, p := range []**engine.Buffer{&w.srcH, &w.backH} {
		b, err := d.e.Alloc(n, engine.Host)
		if err != nil {
			w.close()
			return nil, err
		}
		w.bufs = append(w.bufs, b)
		*p = b
	}
	w.dev, w.dev2 = &devBuf{dev: id % 2, size: n}, &devBuf{dev: 1 - id%2, size: n}
	for _, db := range []*devBuf{w.dev, w.dev2} {
		db.resets = d.e.Devices()[db.dev].Resets
		b, err := d.e.Alloc(n, engine.Gaudi(db.dev))
		if err != nil {
			w.close()
			return nil, err
		}
		db.b = b
	}
	return w, nil
}

func (w *worker) close() {
	for _, c := range w.eps {
		_ = c.ep.Close()
	}
	clear(w.eps)
	for _, b := range w.bufs {
		_ = b.Free()
	}
	w.bufs = nil
	for _, db := range []*devBuf{w.dev, w.dev2} {
		if db != nil && db.b != nil {
			_ = db.b.Free()
			db.b = nil
		}
	}
}

// devTarget is the CS fault target of this process's device dev.
func (d *driver) devTarget(dev int) *target { return d.selfDev[dev] }

// ready makes the worker's device buffers usable before an operation:
// a buffer whose device the driver reset since its allocation (the
// device is lost, or was opened again: DeviceInfo.Lost, Resets), or that
// an operation found lost, is freed, and once the engine has opened the
// device again (WaitDevice) a new one takes its place: the old one's
// contents are gone, and every operation with it would fail. It returns
// false when a buffer could not be replaced (the worker skips this
// operation and tries again at the next).
func (w *worker) ready() bool {
	ok := true
	for _, db := range []*devBuf{w.dev, w.dev2} {
		if !w.d.renew(db, fmt.Sprintf("worker %d", w.id)) {
			ok = false
		}
	}
	return ok
}

// renew replaces db's buffer if its device was reset (see worker.ready).
func (d *driver) renew(db *devBuf, who string) bool {
	info := d.e.Devices()[db.dev]
	if db.b != nil && !db.lost && info.Lost == nil && info.Resets == db.resets {
		return true
	}
	start := time.Now()
	if db.b != nil {
		// A lost buffer still frees (and must).
		if err := db.b.Free(); err != nil {
			d.t.violate("recover", "%s: freeing a buffer of gaudi%d after its reset: %v", who, db.dev, err)
		}
		db.b = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Bound)
	err := d.e.WaitDevice(ctx, db.dev)
	cancel()
	d.t.op("recover/wait-device", err)
	if err != nil {
		d.t.violate("recover", "%s: gaudi%d not usable again within %v of its reset: %v", who, db.dev, d.cfg.Bound, err)
		return false
	}
	db.resets, db.lost = d.e.Devices()[db.dev].Resets, false
	b, err := d.e.Alloc(db.size, engine.Gaudi(db.dev))
	if err != nil {
		// Reset again meanwhile: explained as any lost device is
		// (result counts the operation).
		what := func() string { return fmt.Sprintf("%s: allocating again on gaudi%d after its reset", who, db.dev) }
		d.result("recover/alloc", err, start, what, d.devTarget(db.dev))
		return false
	}
	d.t.op("recover/alloc", nil)
	db.b = b
	d.t.recoveries.Add(1)
	return true
}

// lostIf marks the device buffers of an operation that ended with
// ErrDeviceLost (ready replaces them).
func lostIf(err error, dbs ...*devBuf) {
	if errors.Is(err, engine.ErrDeviceLost) {
		for _, db := range dbs {
			db.lost = true
		}
	}
}

func (w *worker) run() {
	for w.ops = 0; w.ops < maxOpsPerWorker && w.d.loadCtx.Err() == nil; w.ops++ {
		if !w.ready() {
			w.d.sleep(10 * time.Millisecond)
			continue
		}
		r := w.rng.IntN(100)
		switch {
		case r < 40 && len(w.d.peers) > 0:
			w.putGet()
		case r < 60 && len(w.d.peers) > 0:
			w.getRO()
		case r < 63 && len(w.d.peers) > 0:
			w.redial()
		case r < 67 && len(w.d.peers) > 0:
			w.cycle()
		case r < 85:
			w.local()
		default:
			w.batch()
		}
	}
}

// size picks a transfer size: log-uniform from 1 byte to MaxOp.
func (w *worker) size() int {
	bits := w.rng.IntN(bitsLen(w.d.cfg.MaxOp)) + 1
	return 1 + w.rng.IntN(min(1<<bits, w.d.cfg.MaxOp))
}

func bitsLen(n int) int {
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return max(b, 1)
}

func (w *worker) peer() (*peerProc, peerView, bool) {
	p := w.d.peers[w.rng.IntN(len(w.d.peers))]
	v := p.snapshot()
	return p, v, v.alive
}

func (w *worker) transport() string {
	if w.rng.IntN(2) == 0 {
		return "unix"
	}
	return "tcp"
}

// endpoint returns the worker's endpoint to the peer's generation v,
// dialing one when there is none (or it failed).
func (w *worker) endpoint(p *peerProc, v peerView, tr string) (*engine.Endpoint, bool) {
	k := epKey{p.idx, tr}
	if c := w.eps[k]; c != nil {
		if c.gen == v.gen && c.ep.Err() == nil {
			return c.ep, true
		}
		_ = c.ep.Close()
		delete(w.eps, k)
	}
	ep, err := w.d.dial(p, v, tr)
	if err != nil {
		return nil, false
	}
	w.eps[k] = &wep{ep: ep, gen: v.gen}
	return ep, true
}

// dial opens an endpoint to the peer and counts it: a failure while the
// peer is alive and no fault of its explains it counts against the
// listener's availability.
func (d *driver) dial(p *peerProc, v peerView, tr string) (*engine.Endpoint, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	start := time.Now()
	var (
		ep  *engine.Endpoint
		err error
	)
	switch {
	case tr == "unix":
		ep, err = d.e.Dial(ctx, "unix", v.unix)
	case p.inNS:
		if nerr := d.ns.inB(func() { ep, err = d.e.Dial(ctx, "tcp", v.tcp) }); nerr != nil {
			err = nerr
		}
	default:
		ep, err = d.e.Dial(ctx, "tcp", v.tcp)
	}
	d.t.op("dial/"+tr, err)
	if err == nil {
		d.t.dialsOK.Add(1)
		return ep, nil
	}
	now := p.snapshot()
	if now.alive && now.gen == v.gen && !p.faults.explains(start, time.Now()) {
		d.t.dialsFailed.Add(1)
		if d.t.dialsFailed.Load() <= 5 {
			d.t.note("dial %s to live peer %d failed: %v", tr, p.idx, err)
		}
	}
	return nil, err
}

func (w *worker) redial() {
	if len(w.eps) == 0 {
		return
	}
	for k, c := range w.eps {
		_ = c.ep.Close()
		delete(w.eps, k)
		return
	}
}

// cycle dials a fresh endpoint, does one verified put and get through it, and
// closes it (a connect/Put/close cycle, as short-lived clients do).
func (w *worker) cycle() {
	p, v, ok := w.peer()
	if !ok {
		return
	}
	tr := w.transport()
	ep, err := w.d.dial(p, v, tr)
	if err != nil {
		return
	}
	w.putGetOn(p, v, tr, ep)
	_ = ep.Close()
}

// slot picks a usable slot of the worker in a peer's read-write buffer
// (dev: the Gaudi one), or -1.
func (w *worker) slot(peer int, dev bool) int {
	di := 0
	if dev {
		di = 1
	}
	now := time.Now()
	s := w.rng.IntN(slotsPerWorker)
	for range slotsPerWorker {
		if now.After(w.retired[[3]int{peer, di, s}]) {
			return s
		}
		s = (s + 1) % slotsPerWorker
	}
	return -1
}

func (w *worker) retire(peer int, dev bool, s int) {
	di := 0
	if dev {
		di = 1
	}
	w.retired[[3]int{peer, di, s}] = time.Now().Add(2*csTimeout + peerTimeout + time.Second)
}

func locName(dev bool) string {
	if dev {
		return "gaudi"
	}
	return "host"
}

// putGet puts a pattern into the worker's slot of a peer's buffer (from
// host or Gaudi memory here), gets it back and checks it.
func (w *worker) putGet() {
	p, v, ok := w.peer()
	if !ok {
		return
	}
	tr := w.transport()
	ep, ok := w.endpoint(p, v, tr)
	if !ok {
		return
	}
	w.putGetOn(p, v, tr, ep)
}

// rwDevice is the peer's device of its read-write Gaudi buffer, roDevice
// of its read-only one, staleDevice of its stale-key probes' allocations.
const (
	rwDevice    = 0
	roDevice    = 1
	staleDevice = 0
)

// remoteTargets are the targets of an operation with peer p's memory (on
// its device rdev, -1 for host memory) and this process's devices local.
func (d *driver) remoteTargets(p *peerProc, rdev int, local ...*devBuf) []*target {
	ts := []*target{d.self, p.faults}
	if rdev >= 0 {
		ts = append(ts, p.dev[rdev])
	}
	for _, db := range local {
		ts = append(ts, d.devTarget(db.dev))
	}
	return ts
}

func (w *worker) putGetOn(p *peerProc, v peerView, tr string, ep *engine.Endpoint) {
	remoteDev := w.rng.IntN(2) == 0
	key, rdev := v.rwHost, -1
	if remoteDev {
		key, rdev = v.rwDev, rwDevice
	}
	s := w.slot(p.idx, remoteDev)
	if s < 0 {
		return
	}
	n := w.size()
	off := (w.id*slotsPerWorker+s)*slotSize + w.rng.IntN(slotSize-n+1)
	seed := w.rng.Uint64()
	localDev := w.rng.IntN(3) == 0
	what := func() string {
		return fmt.Sprintf("peer %d gen %d %s, %s slot %d offset %d (key generation %d), %d bytes, seed %#x", p.idx, v.gen, tr, locName(remoteDev), s, off, v.keyGen(rdev), n, seed)
	}
	fill(w.srcH.Bytes()[:n], seed, 0)
	ctx := context.Background()
	src := w.srcH.Slice(0, n)
	var local []*devBuf
	if localDev {
		start := time.Now()
		err := w.d.wait(w.d.e.Copy(ctx, w.dev.b.Slice(0, n), src), what)
		w.d.result("copy/h2d", err, start, what, w.d.self, w.d.devTarget(w.dev.dev))
		if err != nil {
			lostIf(err, w.dev)
			return
		}
		src = w.dev.b.Slice(0, n)
		local = append(local, w.dev)
	}
	kind := "put/" + tr + "/" + locName(localDev) + "->" + locName(remoteDev)
	start := time.Now()
	err := w.d.wait(ep.Put(ctx, src, key.Slice(off, n)), what)
	w.d.remoteResult(kind, err, start, what, p, v, rdev, w.d.remoteTargets(p, rdev, local...)...)
	if err != nil {
		lostIf(err, local...)
		w.retire(p.idx, remoteDev, s)
		return
	}
	w.getInto(p, v, ep, tr, key, rdev, off, n, seed, 0, remoteDev, what, func() { w.retire(p.idx, remoteDev, s) })
}

// getRO gets a window of one of the peer's read-only buffers and checks it.
func (w *worker) getRO() {
	p, v, ok := w.peer()
	if !ok {
		return
	}
	tr := w.transport()
	ep, ok := w.endpoint(p, v, tr)
	if !ok {
		return
	}
	remoteDev := w.rng.IntN(2) == 0
	key, rdev := v.roHost, -1
	if remoteDev {
		key, rdev = v.roDev, roDevice
	}
	n := w.size()
	off := w.rng.IntN(roSize - n + 1)
	what := func() string {
		return fmt.Sprintf("peer %d gen %d %s, read-only %s offset %d (key generation %d), %d bytes, seed %#x", p.idx, v.gen, tr, locName(remoteDev), off, v.keyGen(rdev), n, v.roSeed)
	}
	w.getInto(p, v, ep, tr, key, rdev, off, n, v.roSeed, off, remoteDev, what, func() {})
}

// getInto gets key[off, off+n) into host or Gaudi memory here and checks
// it holds the pattern seed at pos.
func (w *worker) getInto(p *peerProc, v peerView, ep *engine.Endpoint, tr string, key engine.RemoteKey, rdev, off, n int, seed uint64, pos int, remoteDev bool, what func() string, onFail func()) {
	ctx := context.Background()
	back := w.backH.Bytes()[:n]
	fill(back, ^seed, 0) // not the pattern: a Get that moves nothing is caught
	localDev := w.rng.IntN(3) == 0
	dst := w.backH.Slice(0, n)
	var local []*devBuf
	if localDev {
		dst = w.dev2.b.Slice(0, n)
		local = append(local, w.dev2)
	}
	kind := "get/" + tr + "/" + locName(remoteDev) + "->" + locName(localDev)
	start := time.Now()
	err := w.d.wait(ep.Get(ctx, dst, key.Slice(off, n)), what)
	w.d.remoteResult(kind, err, start, what, p, v, rdev, w.d.remoteTargets(p, rdev, local...)...)
	if err != nil {
		lostIf(err, local...)
		onFail()
		return
	}
	if localDev {
		start := time.Now()
		err := w.d.wait(w.d.e.Copy(ctx, w.backH.Slice(0, n), dst), what)
		w.d.result("copy/d2h", err, start, what, w.d.self, w.d.devTarget(w.dev2.dev))
		if err != nil {
			lostIf(err, w.dev2)
			return
		}
	}
	if i := check(back, seed, pos); i >= 0 {
		w.d.t.violate("wrong-bytes", "%s (%s): byte %d differs from the pattern after every step succeeded", kind, what(), i)
		return
	}
	w.d.t.bytes.Add(uint64(n))
}

// local copies within this process: host to host, or through both Gaudis.
func (w *worker) local() {
	n := w.size()
	seed := w.rng.Uint64()
	ctx := context.Background()
	fill(w.srcH.Bytes()[:n], seed, 0)
	back := w.backH.Bytes()[:n]
	fill(back, ^seed, 0)
	what := func() string { return fmt.Sprintf("local, %d bytes, seed %#x", n, seed) }
	if w.rng.IntN(2) == 0 {
		start := time.Now()
		err := w.d.wait(w.d.e.Copy(ctx, w.backH.Slice(0, n), w.srcH.Slice(0, n)), what)
		w.d.result("copy/h2h", err, start, what)
		if err != nil {
			return
		}
	} else {
		steps := []struct {
			kind     string
			dst, src engine.Slice
			devs     []*devBuf
		}{
			{"copy/h2d", w.dev.b.Slice(0, n), w.srcH.Slice(0, n), []*devBuf{w.dev}},
			{"copy/d2d", w.dev2.b.Slice(0, n), w.dev.b.Slice(0, n), []*devBuf{w.dev, w.dev2}},
			{"copy/d2h", w.backH.Slice(0, n), w.dev2.b.Slice(0, n), []*devBuf{w.dev2}},
		}
		for _, s := range steps {
			ts := []*target{w.d.self}
			for _, db := range s.devs {
				ts = append(ts, w.d.devTarget(db.dev))
			}
			start := time.Now()
			err := w.d.wait(w.d.e.Copy(ctx, s.dst, s.src), what)
			w.d.result(s.kind, err, start, what, ts...)
			if err != nil {
				lostIf(err, s.devs...)
				return
			}
		}
	}
	if i := check(back, seed, 0); i >= 0 {
		w.d.t.violate("wrong-bytes", "local copy (%s): byte %d differs from the pattern", what(), i)
		return
	}
	w.d.t.bytes.Add(uint64(n))
}

// batch submits a batch of host-to-host and host-to-Gaudi copies and
// checks every copy that succeeded.
func (w *worker) batch() {
	ctx := context.Background()
	k := 2 + w.rng.IntN(15)
	piece := max(1, min(w.size(), len(w.srcH.Bytes())/k))
	seed := w.rng.Uint64()
	fill(w.srcH.Bytes()[:k*piece], seed, 0)
	fill(w.backH.Bytes()[:k*piece], ^seed, 0)
	b := w.d.e.NewBatch()
	for i := range k {
		b.Copy(w.backH.Slice(i*piece, piece), w.srcH.Slice(i*piece, piece))
	}
	what := func() string { return fmt.Sprintf("batch of %d x %d bytes, seed %#x", k, piece, seed) }
	start := time.Now()
	f := b.Submit(ctx)
	err := w.d.wait(f, what)
	w.d.result("batch/h2h", err, start, what)
	if err != nil {
		return
	}
	if i := check(w.backH.Bytes()[:k*piece], seed, 0); i >= 0 {
		w.d.t.violate("wrong-bytes", "batch (%s): byte %d differs from the pattern", what(), i)
		return
	}
	w.d.t.bytes.Add(uint64(k * piece))
}
