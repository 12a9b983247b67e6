package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/memcache"
	"github.com/gxfer/gxfer/queue"
)

// Directions of device copies; each (device, direction) has its own queue.
const (
	dirH2D = iota
	dirD2H
	dirD2D
	numDirs
)

var dirNames = [numDirs]string{"h2d", "d2h", "d2d"}

// job is one submission: a single copy or a batch's copies.
type job struct {
	ops      []op
	fut      *Future
	start    time.Time
	deadline time.Time
	internal bool // submitted by the engine for an op that holds the buffers
	// ctx, if set (a Copy whose ctx can end), drops the job's ops not yet
	// in a command submission once it ends (see dropCanceled).
	ctx context.Context
}

// op is one copy.
type op struct {
	dst, src Slice
	idx      int  // index in the job's future (per-op status)
	handed   bool // owned by a CS or a staging task, or finished (worker-local)
}

// cbPoolSize is how many command buffers of retired CSs a device keeps.
const cbPoolSize = 64

// gdev is the engine's side of one Gaudi device.
type gdev struct {
	e     *Engine
	idx   int
	dev   *dma.Device
	sim   *hlsim.Device
	node  dma.NodeInfo
	log   zerolog.Logger
	actor *cq.DeviceActor

	queues [numDirs]*queue.Queue[*job]
	sched  [numDirs]atomic.Bool

	hostMaps *memcache.Cache     // host range -> *dma.HostMapping
	exports  *memcache.Cache     // device range -> *dma.DMABuf
	types    *memcache.TypeCache // device range -> *Buffer

	cbs  *dma.CBPool   // command buffers of retired CSs
	regs atomic.Uint64 // host mappings performed
}

type hostMapper struct{ g *gdev }

func (h hostMapper) Register(addr, length uint64, _ memcache.Access) (any, error) {
	p, err := h.g.e.hostPointer(addr, length)
	if err != nil {
		return nil, err
	}
	h.g.regs.Add(1)
	return h.g.dev.MapHost(p, length)
}

func (h hostMapper) Deregister(_, _ uint64, v any) error { return v.(*dma.HostMapping).Unmap() }

type exporter struct{ g *gdev }

func (x exporter) Register(addr, length uint64, _ memcache.Access) (any, error) {
	ent, ok := x.g.types.Lookup(addr, length)
	if !ok {
		return nil, newErr(ErrInvalid, "not a device buffer", nil)
	}
	b := ent.Owner.(*Buffer)
	return x.g.dev.ExportDMABuf(b.dmem, 0, b.dmem.AllocSize())
}

func (x exporter) Deregister(_, _ uint64, v any) error { return v.(*dma.DMABuf).Close() }

func (e *Engine) addDevice(d *dma.Device, sim *hlsim.Device) {
	g := &gdev{e: e, idx: len(e.devs), dev: d, sim: sim, types: memcache.NewTypeCache(), cbs: d.NewCBPool(e.cfg.CBSize, cbPoolSize)}
	g.log = e.log.With().Int("dev", g.idx).Str("node", d.Name()).Logger()
	for i := range g.queues {
		g.queues[i] = queue.New[*job](e.cfg.QueueDepth, e.cfg.queueMode())
	}
	g.hostMaps, _ = memcache.New(memcache.Config{
		Registrar: hostMapper{g}, MaxRegions: e.cfg.RegCache.MaxRegions, MaxBytes: e.cfg.RegCache.MaxBytes,
		Logger: g.log,
	})
	g.exports, _ = memcache.New(memcache.Config{Registrar: exporter{g}, Logger: g.log})
	// dma.Device.WaitCS tells a retired CS from one still running, also
	// across a device reset.
	g.actor = cq.NewDeviceActor(d.Name(), d, cq.ActorConfig{
		Spin:       e.cfg.PollSpin,
		OnDeadline: g.checkHealth,
		Logger:     e.cfg.Logger,
	})
	e.devs = append(e.devs, g)
}

func (g *gdev) checkHealth() {
	st, err := g.dev.Status()
	if err != nil || st != dma.StatusOperational {
		g.log.Warn().Err(err).Uint32("status", uint32(st)).Msg("operation deadline missed; device not operational")
		return
	}
	g.log.Warn().Msg("operation deadline missed; device reports operational")
}

// enqueue pushes a job to a direction's queue and makes sure a worker drains it.
func (g *gdev) enqueue(ctx context.Context, dir int, j *job) error {
	if err := g.e.push(ctx, g.queues[dir], j, fmt.Sprintf("gaudi%d %s", g.idx, dirNames[dir])); err != nil {
		return err
	}
	g.schedule(dir)
	return nil
}

// push queues a job, mapping the queue's errors to the engine's: a full
// queue (or a context that ended while waiting for room) is counted as a
// queue-full event.
func (e *Engine) push(ctx context.Context, q *queue.Queue[*job], j *job, name string) error {
	err := q.Push(ctx, j)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, queue.ErrClosed):
		return ErrClosed
	case errors.Is(err, queue.ErrFull):
		e.st.queueFull.Add(1)
		return newErr(ErrQueueFull, name, nil)
	}
	e.st.queueFull.Add(1)
	return err
}

// queueMode is the queue behaviour Config.QueueFull asks for.
func (c Config) queueMode() queue.Mode {
	if c.QueueFull == FailWhenFull {
		return queue.FailFast
	}
	return queue.Wait
}

func (g *gdev) schedule(dir int) {
	if g.sched[dir].CompareAndSwap(false, true) {
		if err := g.e.pool.Submit(func() { g.drain(dir) }); err != nil {
			g.sched[dir].Store(false)
			g.log.Debug().Err(err).Msg("worker pool refused drain task")
		}
	}
}

// drain is a worker task: it empties a queue in batches and submits them.
// A panic fails the ops of the popped jobs that no CS or staging task owns
// yet (releasing their buffers), and the queue is rescheduled.
func (g *gdev) drain(dir int) {
	buf := make([]*job, 64)
	var cur []*job
	defer func() {
		if r := recover(); r != nil {
			g.e.onPanic(r)
			perr := newErr(ErrPanic, fmt.Sprint(r), nil)
			for _, j := range cur {
				for i := range j.ops {
					if !j.ops[i].handed {
						g.e.finishOp(j, &j.ops[i], perr)
					}
				}
			}
			g.sched[dir].Store(false)
			if g.queues[dir].Len() > 0 {
				g.schedule(dir)
			}
		}
	}()
	for {
		n := g.queues[dir].PopBatch(buf)
		if n == 0 {
			g.sched[dir].Store(false)
			if g.queues[dir].Len() > 0 && g.sched[dir].CompareAndSwap(false, true) {
				continue
			}
			return
		}
		cur = buf[:n]
		g.process(dir, cur)
		cur = nil
		clear(buf[:n])
	}
}

// csItem is one op inside a command submission.
type csItem struct {
	j    *job
	o    *op
	done bool
}

// csRec is one command submission under construction or in flight: the
// CS itself (dma.CSBuilder: packets, queues, sealing) and what the engine
// ties to it (the ops it carries, the host mappings they hold).
type csRec struct {
	g       *gdev
	cs      *dma.CSBuilder
	items   []csItem
	regions []*memcache.Region
}

func (g *gdev) streams(dir int) []uint32 {
	switch dir {
	case dirH2D:
		return g.dev.H2DQueues()
	case dirD2H:
		return g.dev.D2HQueues()
	}
	return g.dev.D2DQueues()
}

// ref names one op of a job.
type ref struct {
	j *job
	o *op
}

// process turns queued jobs into command submissions. Ops that belong to
// another (device, direction) — batches mix them — are handed to that
// device's processing from this worker.
func (g *gdev) process(dir int, jobs []*job) {
	if h := g.e.hookProcess.Load(); h != nil {
		(*h)()
	}
	var mine []ref
	var others map[routeKey][]ref
	for _, j := range jobs {
		if g.e.dropCanceled(j) {
			continue
		}
		for i := range j.ops {
			o := &j.ops[i]
			rg, rdir := g.e.route(o)
			if rg == g && rdir == dir {
				mine = append(mine, ref{j, o})
				continue
			}
			if others == nil {
				others = map[routeKey][]ref{}
			}
			k := routeKey{rg, rdir}
			others[k] = append(others[k], ref{j, o})
		}
	}
	g.processRefs(dir, mine)
	for k, refs := range others {
		k.g.processRefs(k.dir, refs)
	}
}

type routeKey struct {
	g   *gdev
	dir int
}

func (g *gdev) processRefs(dir int, refs []ref) {
	if len(refs) == 0 {
		return
	}
	streams := g.streams(dir)
	newRec := func() (*csRec, error) {
		cs, err := g.dev.NewCSBuilder(dma.CSOptions{
			Queues: streams, CBSize: g.e.cfg.CBSize, PieceSize: g.e.cfg.ChunkSize, NewCB: g.cbs.Get,
		})
		if err != nil {
			kind := ErrDevice
			switch {
			case errors.Is(err, dma.ErrNotSupported):
				kind = ErrNotSupported
			case errors.Is(err, dma.ErrInvalid):
				kind = ErrInvalid
			}
			return nil, newErr(kind, fmt.Sprintf("command submission on gaudi%d (Config.CBSize %d)", g.idx, g.e.cfg.CBSize), err)
		}
		return &csRec{g: g, cs: cs}, nil
	}
	// recErr fails every op of this device: its CSs cannot be built.
	rec, recErr := newRec()
	capacity := 0 // LIN_DMA packets an empty CS holds
	if recErr == nil {
		capacity = rec.cs.Capacity()
	}
	for _, rf := range refs {
		j, o := rf.j, rf.o
		if crossDevice(o) {
			g.e.stage(j, o)
			continue
		}
		if !j.deadline.IsZero() && time.Now().After(j.deadline) {
			g.e.finishOp(j, o, newErr(ErrTimeout, "deadline passed while queued", nil))
			continue
		}
		if recErr != nil {
			g.e.finishOp(j, o, recErr)
			continue
		}
		if packets := rec.cs.Packets(o.n()); packets > capacity {
			g.e.finishOp(j, o, newErr(ErrInvalid, fmt.Sprintf(
				"a %d-byte copy needs %d packets, more than one command submission holds (%d); raise Config.ChunkSize or CBSize",
				o.n(), packets, capacity), nil))
			continue
		}
		if len(rec.items) >= g.e.cfg.MaxOpsPerCS || !rec.cs.Fits(o.n()) {
			rec.submit()
			rec, _ = newRec() // the options were accepted above
		}
		// Get every command buffer first: then adding packets cannot fail
		// half-way through an op.
		if err := rec.cs.Reserve(); err != nil {
			g.e.finishOp(j, o, newErr(ErrDevice, "command buffer", err))
			continue
		}
		dst, src, regs, err := g.resolve(o)
		if err != nil {
			g.e.finishOp(j, o, err)
			continue
		}
		if err := rec.cs.AddCopy(dst, src, o.n()); err != nil {
			// Only an encoding bug gets here; the CBs may hold part of
			// this op, so the whole CS is dropped.
			for _, r := range regs {
				g.hostMaps.Put(r)
			}
			err = newErr(ErrDevice, "add copy to command submission", err)
			g.e.finishOp(j, o, err)
			rec.finish(err)
			rec, _ = newRec()
			continue
		}
		o.handed = true
		rec.regions = append(rec.regions, regs...)
		rec.items = append(rec.items, csItem{j: j, o: o})
	}
	if rec != nil {
		rec.submit()
	}
}

// nextDeadline is the earliest deadline of the ops not yet ended.
func (r *csRec) nextDeadline() time.Time {
	var d time.Time
	for i := range r.items {
		it := &r.items[i]
		if !it.done && !it.j.deadline.IsZero() && (d.IsZero() || it.j.deadline.Before(d)) {
			d = it.j.deadline
		}
	}
	return d
}

func (o *op) n() uint64 { return o.src.n }

// resolve turns an op's slices into device addresses, mapping host memory
// into the device MMU through the registration cache.
func (g *gdev) resolve(o *op) (dst, src uint64, regs []*memcache.Region, err error) {
	addr := func(s Slice) (uint64, error) {
		if s.buf.loc.gaudi {
			return s.buf.dmem.Addr() + s.off, nil
		}
		b := s.buf
		r, err := g.hostMaps.Get(b.Addr(), b.size, memcache.AccessRead|memcache.AccessWrite)
		if err != nil {
			return 0, newErr(ErrDevice, fmt.Sprintf("map host memory into gaudi%d", g.idx), err)
		}
		regs = append(regs, r)
		m := r.Value().(*dma.HostMapping)
		return m.DeviceAddr() + (s.hostAddr() - uint64(m.HostAddr())), nil
	}
	if dst, err = addr(o.dst); err == nil {
		src, err = addr(o.src)
	}
	if err != nil {
		for _, r := range regs {
			g.hostMaps.Put(r)
		}
		return 0, 0, nil, err
	}
	return dst, src, regs, nil
}

// submit sends the CS and hands it to the device's completion actor.
func (r *csRec) submit() {
	g := r.g
	if len(r.items) == 0 {
		r.releaseCBs()
		return
	}
	chunks, err := r.cs.Seal()
	if err != nil {
		r.finish(newErr(ErrDevice, "seal command submission", err))
		return
	}
	seq, err := g.dev.Submit(chunks)
	if err != nil {
		r.finish(newErr(ErrDevice, fmt.Sprintf("submit CS on gaudi%d", g.idx), err))
		return
	}
	g.e.st.cs.Add(1)
	g.e.st.packets.Add(uint64(r.cs.Len()))
	g.log.Debug().Uint64("seq", seq).Int("ops", len(r.items)).Int("packets", r.cs.Len()).Int("cbs", len(chunks)).Msg("CS submitted")
	err = g.actor.Track(context.Background(), cq.Submission{Seq: seq, Deadline: r.nextDeadline(), OnDone: r.finish, OnTimeout: r.timeout})
	if err != nil {
		// The actor is closing: wait for the CS here so that nothing it
		// uses is released early.
		_, werr := g.dev.Wait(seq, g.e.cfg.CloseGrace)
		if werr == nil {
			werr = ErrClosed
		}
		r.finish(werr)
	}
}

func (r *csRec) releaseCBs() { r.cs.Release(r.g.cbs.Put) }

// timeout ends the CS's operations whose deadline passed with ErrTimeout
// and returns the next deadline. The CS stays tracked: buffers, mappings
// and command buffers are released only when it really retires.
func (r *csRec) timeout(now time.Time) time.Time {
	for i := range r.items {
		it := &r.items[i]
		if !it.done && !it.j.deadline.IsZero() && !now.Before(it.j.deadline) {
			it.done = true
			r.g.e.opDone(it.j, it.o, newErr(ErrTimeout, fmt.Sprintf("gaudi%d: the device has not finished the copy", r.g.idx), nil))
		}
	}
	return r.nextDeadline()
}

// finish retires the CS: releases command buffers, host mappings and
// buffer references, then completes the operations.
func (r *csRec) finish(err error) {
	if err != nil {
		err = mapDeviceErr(err)
	}
	r.releaseCBs()
	for _, reg := range r.regions {
		r.g.hostMaps.Put(reg)
	}
	r.regions = nil
	for i := range r.items {
		it := &r.items[i]
		if r.g.e.cfg.RegCache.Disabled {
			r.g.uncache(it.o)
		}
		r.g.e.opRelease(it.j, it.o)
		if !it.done {
			it.done = true
			r.g.e.opDone(it.j, it.o, err)
		}
	}
}

// uncache drops host mappings after use when the registration cache is off.
func (g *gdev) uncache(o *op) {
	for _, s := range []Slice{o.dst, o.src} {
		if !s.buf.loc.gaudi {
			g.hostMaps.Invalidate(s.buf.Addr(), s.buf.size)
		}
	}
}

func mapDeviceErr(err error) error {
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, ErrTimeout), errors.Is(err, ErrAborted), errors.Is(err, ErrDevice):
		return err
	case errors.Is(err, dma.ErrCSTimedOut):
		return newErr(ErrTimeout, "command submission timed out on the device", err)
	case errors.Is(err, dma.ErrCSAborted):
		return newErr(ErrAborted, "", err)
	}
	return newErr(ErrDevice, "", err)
}

func (g *gdev) closeQueues() {
	for _, q := range g.queues {
		q.Close()
	}
}

func (g *gdev) failQueued(err error) {
	buf := make([]*job, 64)
	for _, q := range g.queues {
		for {
			n := q.PopBatch(buf)
			if n == 0 {
				break
			}
			for _, j := range buf[:n] {
				for i := range j.ops {
					g.e.finishOp(j, &j.ops[i], err)
				}
			}
		}
	}
}

// closeDevice closes the device context first, so that nothing the
// hardware may still touch is released before it stops.
func (g *gdev) closeDevice() error { return g.dev.Close() }

// closeCaches releases the caches and pooled command buffers (after the
// device is closed; their releases are then no-ops on the driver side).
func (g *gdev) closeCaches() error {
	return errors.Join(g.hostMaps.Close(), g.exports.Close(), g.cbs.Close())
}
