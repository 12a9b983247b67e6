package copier

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/memcache"
)

// csItem is one op inside a command submission.
type csItem struct {
	j    *Job
	o    *Op
	done bool
}

// csRec is one command submission under construction or in flight: the
// CS itself (dma.CSBuilder: packets, queues, sealing) and what the copier
// ties to it (the ops it carries, the host mappings they hold).
//
// Records are reused (Device.recs): one that carried a CS goes back to
// its device's pool when both the code that built and submitted it and
// finish are done with it (refs), so that a CS costs no allocation for
// its record, builder or callbacks.
type csRec struct {
	g       *Device
	cs      dma.CSBuilder
	items   []csItem
	regions []*memcache.Region
	// itemBuf and regionBuf back items and regions for a CS of one copy
	// (a lone copy, or the first of a drain); bigItems and bigRegions
	// are the larger arrays a record made before, kept for its next CS.
	itemBuf    [1]csItem
	regionBuf  [2]*memcache.Region
	bigItems   []csItem
	bigRegions []*memcache.Region
	// onDone and onTimeout are finish and timeout as the values a
	// cq.Submission takes, and stopSub stopSubmit as the value
	// dma.Device.SubmitUntil takes, made once per record.
	onDone    func(error)
	onTimeout func(time.Time) time.Time
	stopSub   func() error
	// refs counts the record's holders: the build (processRefs, then
	// submit) and finish. The last to let go returns it to the pool.
	refs atomic.Int32
}

// newRec starts a record for a CS of up to n copies built with o.
func (g *Device) newRec(o dma.CSOptions, n int) (*csRec, error) {
	r, _ := g.recs.Get().(*csRec)
	if r == nil {
		r = &csRec{g: g}
		r.onDone, r.onTimeout, r.stopSub = r.finish, r.timeout, r.stopSubmit
	}
	if err := g.Dev.InitCSBuilder(&r.cs, o); err != nil {
		g.recs.Put(r)
		return nil, err
	}
	switch {
	case n <= len(r.itemBuf):
		r.items, r.regions = r.itemBuf[:0], r.regionBuf[:0]
	case cap(r.bigItems) >= n:
		r.items, r.regions = r.bigItems[:0], r.bigRegions[:0]
	default:
		r.bigItems, r.bigRegions = make([]csItem, 0, n), make([]*memcache.Region, 0, 2*n)
		r.items, r.regions = r.bigItems, r.bigRegions
	}
	r.refs.Store(2)
	return r, nil
}

// unref drops one holder of r; the last returns r to the pool, keeping
// nothing of its CS: its jobs are cleared here, its mappings by finish,
// its command buffers by Release (the builder keeps only what its
// device does, and newRec initializes it again).
func (r *csRec) unref() {
	if r.refs.Add(-1) != 0 {
		return
	}
	clear(r.items)
	r.items, r.regions = nil, nil
	r.g.recs.Put(r)
}

// pipelineFirstOps caps the first command submission a drain sends; each
// next one may carry twice as many copies as the one before, up to
// MaxOpsPerCS. The device so starts on a large batch while the copier
// still builds the rest of it, and stays busy: it moves a copy more
// slowly than the copier encodes one.
const pipelineFirstOps = 32

func (g *Device) processRefs(dir int, refs []ref) {
	if len(refs) == 0 {
		return
	}
	c := g.c
	streams, oneQueue := g.streams(dir, refs)
	opts := dma.CSOptions{
		Queues: streams, CBSize: c.cfg.CBSize, PieceSize: c.cfg.ChunkSize, NewCB: g.getCB, OneQueue: oneQueue,
	}
	// newRec starts a CS for up to limit copies (its items and mappings
	// allocated once, not grown copy by copy).
	newRec := func(limit int) (*csRec, error) {
		r, err := g.newRec(opts, min(limit, len(refs)))
		if err != nil {
			kind := gxerr.Device
			switch {
			case errors.Is(err, dma.ErrNotSupported):
				kind = gxerr.NotSupported
			case errors.Is(err, dma.ErrInvalid):
				kind = gxerr.Invalid
			}
			return nil, gxerr.New(kind, fmt.Sprintf("command submission on gaudi%d (Config.CBSize %d)", g.Idx, c.cfg.CBSize), err)
		}
		return r, nil
	}
	limit := min(c.cfg.MaxOpsPerCS, pipelineFirstOps) // copies in the CS being built
	// recErr fails every op of this device: its CSs cannot be built.
	rec, recErr := newRec(limit)
	capacity := 0 // LIN_DMA packets an empty CS holds
	if recErr == nil {
		capacity = rec.cs.Capacity()
	}
	var cross []ref // copies between devices, staged through host memory
	for _, rf := range refs {
		j, o := rf.j, rf.o
		if crossDevice(o) {
			cross = append(cross, rf)
			continue
		}
		if !j.Deadline.IsZero() && time.Now().After(j.Deadline) {
			c.finishOp(j, o, gxerr.New(gxerr.Timeout, "deadline passed while queued", nil))
			continue
		}
		// A job's ctx may end while its ops fill several CSs (a large
		// batch): those not yet in one are dropped, as queued ones are.
		if j.Ctx != nil && j.Ctx.Err() != nil {
			c.finishOp(j, o, gxerr.Ctx("copy dropped before it started", j.Ctx.Err()))
			continue
		}
		if recErr != nil {
			c.finishOp(j, o, recErr)
			continue
		}
		if packets := rec.cs.Packets(o.n()); packets > capacity {
			c.finishOp(j, o, errTooLarge(o.n(), packets, capacity))
			continue
		}
		if len(rec.items) >= limit || !rec.cs.Fits(o.n()) {
			rec.submit()
			limit = min(2*limit, c.cfg.MaxOpsPerCS)
			rec, _ = newRec(limit) // the options were accepted above
		}
		// Get every command buffer first: then adding packets cannot fail
		// half-way through an op.
		if err := rec.cs.Reserve(); err != nil {
			c.finishOp(j, o, DeviceErr("command buffer", err))
			continue
		}
		dst, src, err := g.resolve(o, &rec.regions)
		if err != nil {
			c.finishOp(j, o, err)
			continue
		}
		if err := rec.cs.AddCopy(dst, src, o.n()); err != nil {
			// Only an encoding bug gets here; the CBs may hold part of
			// this op, so the whole CS is dropped (with this op's
			// mappings, which finish releases).
			err = DeviceErr("add copy to command submission", err)
			c.finishOp(j, o, err)
			rec.finish(err)
			rec.unref()
			rec, _ = newRec(limit)
			continue
		}
		o.handed = true
		rec.items = append(rec.items, csItem{j: j, o: o})
	}
	c.stage(cross)
	if rec != nil {
		rec.submit()
	}
}

// errTooLarge refuses a copy of n bytes that needs more LIN_DMA packets
// than an empty command submission holds.
func errTooLarge(n uint64, packets, capacity int) error {
	return gxerr.New(gxerr.Invalid, fmt.Sprintf(
		"a %d-byte copy needs %d packets, more than one command submission holds (%d); raise Config.ChunkSize or CBSize",
		n, packets, capacity), nil)
}

// CheckSize refuses (ErrInvalid) a device copy that no command
// submission of its device and direction can hold, or, between two
// devices, whose staging chunks none can: the engine checks it with a
// copy's other arguments, so that a batch holding one runs nothing
// (processRefs would fail it only once the batch's other copies ran).
// A direction whose CSs cannot be built at all is left to processRefs.
func (c *Copier) CheckSize(dst, src Slice) error {
	o := Op{Dst: dst, Src: src}
	g, dir := route(&o)
	if g == nil {
		return nil
	}
	if !crossDevice(&o) {
		return g.checkSize(dir, o.n())
	}
	n := min(o.n(), StageChunk)
	err := g.checkSize(dirD2H, n)
	if err == nil {
		err = dst.M.Device.checkSize(dirH2D, n)
	}
	if err != nil {
		return gxerr.New(gxerr.Invalid, fmt.Sprintf("a %d-byte copy between devices is staged in chunks of %d bytes", o.n(), n), err)
	}
	return nil
}

func (g *Device) checkSize(dir int, n uint64) error {
	z := &g.sizer[dir]
	if !z.ok {
		return nil
	}
	if packets, capacity := z.b.Packets(n), z.b.Capacity(); packets > capacity {
		return errTooLarge(n, packets, capacity)
	}
	return nil
}

// nextDeadline is the earliest deadline of the ops not yet ended.
func (r *csRec) nextDeadline() time.Time {
	var d time.Time
	for i := range r.items {
		it := &r.items[i]
		if !it.done && !it.j.Deadline.IsZero() && (d.IsZero() || it.j.Deadline.Before(d)) {
			d = it.j.Deadline
		}
	}
	return d
}

// errSubmitDropped: every op of a CS the device has not taken yet (its
// queue or completion slot full) missed its deadline or had its ctx end,
// or the copier is stopping.
var errSubmitDropped = errors.New("every copy of the command submission ended before the device took it")

// stopSubmit is the stop function of the CS's submission
// (dma.Device.SubmitUntil): the retries of a CS whose queue stays full
// end once every op in it has missed its deadline or had its ctx end, as
// queued ops are dropped then, for nothing touched their memory, and once
// Stop has begun, which fails queued ops with ErrClosed and waits for the
// submissions under way (those on callers' goroutines without a bound).
// Without it a copy's deadline was looked at only once the device took
// the CS, and its ctx not at all: a copy run on its caller's goroutine (an
// idle device) blocked the caller, and Close, for the whole retry budget.
func (r *csRec) stopSubmit() error {
	if r.g.c.stopping.Load() {
		return errSubmitDropped
	}
	now := time.Now()
	for i := range r.items {
		if r.items[i].dropReason(r.g, now) == nil {
			return nil
		}
	}
	return errSubmitDropped
}

// dropReason is why an op of a CS the device has not taken ends without
// running: its deadline passed, its ctx ended, or the copier is stopping;
// nil for none.
func (it *csItem) dropReason(g *Device, now time.Time) error {
	j := it.j
	if !j.Deadline.IsZero() && !now.Before(j.Deadline) {
		return gxerr.New(gxerr.Timeout, fmt.Sprintf("deadline passed before gaudi%d took the command submission (its queue stayed full)", g.Idx), nil)
	}
	if j.Ctx != nil && j.Ctx.Err() != nil {
		return gxerr.Ctx(fmt.Sprintf("copy dropped before gaudi%d took its command submission", g.Idx), j.Ctx.Err())
	}
	if g.c.stopping.Load() {
		return gxerr.New(gxerr.Closed, fmt.Sprintf("the engine closed before gaudi%d took the command submission (its queue stayed full)", g.Idx), nil)
	}
	return nil
}

// drop ends a CS the device never took (stopSubmit): its ops end with
// their dropReason. It is called once per CS instead of retire.
func (r *csRec) drop() {
	defer r.unref()
	c := r.g.c
	r.releaseHeld()
	now := time.Now()
	for i := range r.items {
		it := &r.items[i]
		if c.cfg.RegCacheOff {
			r.g.uncache(it.o)
		}
		c.opRelease(it.j, it.o)
		it.done = true
		c.opDone(it.j, it.o, it.dropReason(r.g, now))
	}
}

// resolve turns an op's slices into device addresses, mapping host memory
// into the device MMU through the registration cache; the mappings it
// takes are appended to *regs (on an error none is left there).
func (g *Device) resolve(o *Op, regs *[]*memcache.Region) (dst, src uint64, err error) {
	held := len(*regs)
	if dst, err = g.addr(o.Dst, regs); err == nil {
		src, err = g.addr(o.Src, regs)
	}
	if err != nil {
		for _, r := range (*regs)[held:] {
			g.HostMaps.Put(r)
		}
		clear((*regs)[held:])
		*regs = (*regs)[:held]
		return 0, 0, err
	}
	return dst, src, nil
}

// addr is the device address of s, appending the host mapping it takes
// (if any) to *regs.
func (g *Device) addr(s Slice, regs *[]*memcache.Region) (uint64, error) {
	m := s.M
	if m.Gaudi {
		return m.Addr + s.Off, nil
	}
	r, err := g.HostMaps.Get(m.Addr, m.Size, memcache.AccessRead|memcache.AccessWrite)
	if err != nil {
		return 0, DeviceErr(fmt.Sprintf("map host memory into gaudi%d", g.Idx), err)
	}
	*regs = append(*regs, r)
	hm := r.Value().(*dma.HostMapping)
	return hm.DeviceAddr() + (m.Addr + s.Off - uint64(hm.HostAddr())), nil
}

// submit sends the CS and hands it to the device's completion actor. The
// builder's hold on r ends here.
func (r *csRec) submit() {
	defer r.unref()
	g := r.g
	c := g.c
	if len(r.items) == 0 {
		r.releaseCBs()
		r.unref() // finish's: it is not called
		return
	}
	chunks, err := r.cs.Seal()
	if err != nil {
		r.retire(DeviceErr("seal command submission", err))
		return
	}
	seq, t, err, terr := r.submitTracked(chunks)
	if errors.Is(err, errSubmitDropped) {
		r.drop()
		return
	}
	if err != nil {
		// Not submitted (also when refused for a malfunction): nothing
		// of it runs.
		r.retire(DeviceErr(fmt.Sprintf("submit CS on gaudi%d", g.Idx), err))
		return
	}
	if terr == nil {
		r.attach(t)
		return
	}
	{
		// The actor is closing: wait for the CS here so that nothing it
		// uses is released early; one still running after the grace waits
		// for the device to stop.
		st, werr := g.Dev.Wait(seq, c.cfg.CloseGrace)
		switch {
		case werr == nil && st == dma.CSBusy:
			g.abandon(r)
		case werr == nil:
			r.retire(nil) // it completed
		case errors.Is(werr, dma.ErrMalfunction):
			r.failRunning(werr)
		case errors.Is(werr, dma.ErrClosed):
			// The copier closed the device meanwhile, the way that
			// stops it (CloseDevices after a worker outlived Stop).
			r.retire(g.givenUp())
		default:
			r.retire(werr)
		}
	}
}

// submitTracked sends the CS and hands it to the device's completion
// actor within the device's submission window (window.go): err is the
// submission's error, terr Track's (the actor is closing).
func (r *csRec) submitTracked(chunks []dma.Chunk) (seq uint64, t *cq.Ticket, err, terr error) {
	g := r.g
	k := g.win.enter()
	defer g.win.exit(k)
	if seq, err = g.Dev.SubmitUntil(chunks, r.stopSub); err != nil {
		return 0, nil, err, nil
	}
	g.c.st.CS.Add(1)
	g.c.st.Packets.Add(uint64(r.cs.Len()))
	g.log.Debug().Uint64("seq", seq).Int("ops", len(r.items)).Int("packets", r.cs.Len()).Int("cbs", len(chunks)).Msg("CS submitted")
	if h := g.c.HookSubmitted.Load(); h != nil {
		(*h)(seq)
	}
	t, terr = g.Actor.TrackTicket(context.Background(), cq.Submission{Seq: seq, Deadline: r.nextDeadline(), OnDone: r.onDone, OnTimeout: r.onTimeout, Progress: g.progress})
	return seq, t, nil, terr
}

// attach lets the futures of the CS's operations poll it (Future.Wait).
// A CS that some future could not take (its slots are full), or whose
// future's caller already blocks in Done (it polls nothing), is the
// actor's to retire: the actor is kicked, in case it sleeps while
// waiters watch what it tracks (cq.Ticket.Watch). The CS may already be
// retiring meanwhile: attach only reads the items' jobs, which finish
// does not write.
func (r *csRec) attach(t *cq.Ticket) {
	var last *Future
	kick := false
	for i := range r.items {
		if f := r.items[i].j.Fut; f != last {
			// A future with no free slot leaves the CS to the actor; one
			// whose caller already blocks in Done will not poll it.
			kick = !f.addTicket(t) || f.blocked.Load() || kick
			last = f
		}
	}
	if kick {
		t.Kick()
	}
}

func (r *csRec) releaseCBs() { r.cs.Release(r.g.putCB) }

// releaseHeld releases the CS's command buffers and host mappings.
func (r *csRec) releaseHeld() {
	r.releaseCBs()
	for _, reg := range r.regions {
		r.g.HostMaps.Put(reg)
	}
	clear(r.regions) // the record's arrays are reused (unref)
	r.regions = nil
}

// timeout ends the CS's operations whose deadline passed with ErrTimeout
// and returns the next deadline. The CS stays tracked: buffers, mappings
// and command buffers are released only when it really retires.
func (r *csRec) timeout(now time.Time) time.Time {
	for i := range r.items {
		it := &r.items[i]
		if !it.done && !it.j.Deadline.IsZero() && !now.Before(it.j.Deadline) {
			it.done = true
			r.g.c.opDone(it.j, it.o, gxerr.New(gxerr.Timeout, fmt.Sprintf("gaudi%d: the device has not finished the copy", r.g.Idx), nil))
		}
	}
	return r.nextDeadline()
}

// finish ends the CS (the actor's OnDone): it retires it, unless the
// actor gave up on it at Close (cq.ErrClosed itself, not a wrapped one):
// the device may still run it, so it waits for the device to stop
// (Device.abandon). It is called once per CS.
func (r *csRec) finish(err error) {
	if err == cq.ErrClosed {
		r.g.abandon(r)
		return
	}
	if errors.Is(err, dma.ErrMalfunction) {
		r.failRunning(err)
		return
	}
	r.retire(err)
}

// failRunning ends a CS that the device's malfunction ended while the
// hardware may still run it: with the driver's reset_on_lockup=0 a
// lockup leaves the device in NEEDS_RESET without a reset, its waits
// refused, and its engines still on the CSs in flight (dma/hlsim
// RULES.md R10). Its operations fail now; what it uses (command
// buffers, host mappings, buffer references) is kept, as for a CS
// abandoned at Close, until the device is closed the way that stops it
// (Device.abandon); an internal copy's future resolves only then.
func (r *csRec) failRunning(err error) {
	err = mapDeviceErr(err)
	c := r.g.c
	for i := range r.items {
		if it := &r.items[i]; !it.done {
			it.done = true
			c.opDone(it.j, it.o, err)
		}
	}
	r.g.abandon(r)
}

// retire releases the CS's command buffers, host mappings and buffer
// references, then completes its operations. It is called once per CS,
// and its hold on r ends with it.
func (r *csRec) retire(err error) {
	defer r.unref()
	if err != nil {
		err = mapDeviceErr(err)
	}
	c := r.g.c
	r.releaseHeld()
	// The successful ops of one job are recorded and completed together
	// (one latency reading, one update of the future): a batch's CS ends
	// many of them at once. Their buffer references are dropped together
	// too (rel), each before its op completes.
	var run doneRun
	var rel relRuns
	for i := range r.items {
		it := &r.items[i]
		if c.cfg.RegCacheOff {
			r.g.uncache(it.o)
		}
		if it.j.Internal {
			c.opRelease(it.j, it.o)
		} else {
			rel.add(c, 0, it.o.Dst.M)
			rel.add(c, 1, it.o.Src.M)
		}
		if it.done {
			continue
		}
		it.done = true
		if err != nil || it.j.Internal {
			rel.flush(c)
			c.opDone(it.j, it.o, err)
			continue
		}
		if run.j != it.j {
			rel.flush(c)
			run.flush(c)
			run = doneRun{j: it.j}
		}
		run.n++
		run.bytes += it.o.n()
	}
	rel.flush(c)
	run.flush(c)
}

// relRuns drops the buffer references of a CS's copies with one atomic
// update per run of consecutive copies on the same buffer, for each of
// the two roles (0: destination, 1: source), as copier.release does one
// at a time.
type relRuns [2]struct {
	m *Mem
	n uint64
}

func (r *relRuns) add(c *Copier, role int, m *Mem) {
	if r[role].m != m {
		r.flushRole(c, role)
		r[role].m = m
	}
	r[role].n++
}

func (r *relRuns) flushRole(c *Copier, role int) {
	if x := &r[role]; x.m != nil {
		c.releaseN(x.m, x.n)
		x.m, x.n = nil, 0
	}
}

func (r *relRuns) flush(c *Copier) {
	r.flushRole(c, 0)
	r.flushRole(c, 1)
}

// doneRun is a run of successful ops of one job ending together.
type doneRun struct {
	j     *Job
	n     int
	bytes uint64
}

// flush records the run's ops and completes them in their future (which
// keeps per-op status only for errors).
func (d *doneRun) flush(c *Copier) {
	if d.n == 0 {
		return
	}
	c.st.RecordN(c.clock()-d.j.Start, d.n, d.bytes)
	d.j.Fut.CompleteN(d.n)
}

// uncache drops host mappings after use when the registration cache is off.
func (g *Device) uncache(o *Op) {
	for _, s := range []Slice{o.Dst, o.Src} {
		if !s.M.Gaudi {
			g.HostMaps.Invalidate(s.M.Addr, s.M.Size)
		}
	}
}

// DeviceErr is the error of a failed dma call: ErrDeviceLost's kind if the
// driver reset the device, ErrClosed's if it was closed (Close ends what
// is still waiting for it), gxerr.Device otherwise.
func DeviceErr(what string, err error) error {
	if errors.Is(err, dma.ErrDeviceReset) {
		return gxerr.New(gxerr.DeviceLost, what, err)
	}
	if errors.Is(err, dma.ErrClosed) {
		return gxerr.New(gxerr.Closed, what, err)
	}
	return gxerr.New(gxerr.Device, what, err)
}

func mapDeviceErr(err error) error {
	switch {
	case errors.Is(err, gxerr.Closed), errors.Is(err, gxerr.Timeout), errors.Is(err, gxerr.Aborted), errors.Is(err, gxerr.Device),
		errors.Is(err, gxerr.DeviceLost):
		return err
	case errors.Is(err, dma.ErrDeviceReset):
		return gxerr.New(gxerr.DeviceLost, "the driver reset the device: the copy did not complete and the device's buffers are gone", err)
	case errors.Is(err, dma.ErrCSTimedOut):
		return gxerr.New(gxerr.Timeout, "command submission timed out on the device", err)
	case errors.Is(err, dma.ErrCSAborted):
		return gxerr.New(gxerr.Aborted, "", err)
	}
	return gxerr.New(gxerr.Device, "", err)
}
