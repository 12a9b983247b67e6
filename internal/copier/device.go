package copier

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/memcache"
	"github.com/gxfer/gxfer/queue"
)

// cbPoolSize is how many command buffers of retired CSs a device keeps.
const cbPoolSize = 64

// Device is the copier's side of one Gaudi device.
type Device struct {
	c     *Copier
	Idx   int
	Dev   *dma.Device
	Sim   *hlsim.Device // the emulator, for emulated devices
	Node  dma.NodeInfo
	log   zerolog.Logger
	Actor *cq.DeviceActor // completes its command submissions

	queues [NumDirs]*queue.Queue[*Job]
	sched  [NumDirs]atomic.Bool
	dirQs  [NumDirs][]uint32 // the device queues (streams) of each direction
	// sizer is an empty CS on each direction's queues (ok: one could be
	// built), for CheckSize: its Capacity and Packets are those
	// processRefs compares.
	sizer [NumDirs]struct {
		ok bool
		b  dma.CSBuilder
	}

	HostMaps *memcache.Cache     // host range -> *dma.HostMapping
	Exports  *memcache.Cache     // device range -> *dma.DMABuf
	Types    *memcache.TypeCache // device range -> *Mem

	recs  sync.Pool   // *csRec whose CSs retired (csRec.unref)
	cbs   *dma.CBPool // command buffers of retired CSs
	getCB func() (*dma.CB, error)
	putCB func(*dma.CB) // cbs' methods as values, made once (not per CS)
	// progress is Dev.Progress as a value, made once: each CS's
	// cq.Submission.Progress.
	progress func() (uint64, bool)
	Regs     atomic.Uint64 // host mappings performed

	aband abandoned // CSs given up on at Close, kept until the device stops
	win   subWindow // submissions between their CS ioctl and their Track (window.go)

	open     Opener    // opens the device again after a reset (nil: cannot)
	Gen      int       // contexts opened before this one at this index (resets)
	lostOnce sync.Once // the reset is handled once (reopen.go)
	// prior holds the counters of the contexts this one replaced (set
	// before it is published in Devs): Counts goes on from them.
	prior Counts
}

// Counts are a device's counters, summed over the contexts opened at its
// index (a device reset replaces the context, its caches and its actor,
// whose own counters start at zero); the gauges are the current
// context's.
type Counts struct {
	HostMappings      uint64
	HostMaps, Exports memcache.Stats
	Actor             cq.ActorStats
}

// Counts returns g's counters, those of the contexts it replaced included.
func (g *Device) Counts() Counts {
	c := Counts{HostMappings: g.prior.HostMappings + g.Regs.Load(),
		HostMaps: g.HostMaps.Stats(), Exports: g.Exports.Stats(), Actor: g.Actor.Stats()}
	c.HostMaps.AddCounters(g.prior.HostMaps)
	c.Exports.AddCounters(g.prior.Exports)
	c.Actor.AddCounters(g.prior.Actor)
	return c
}

type hostMapper struct{ g *Device }

func (h hostMapper) Register(addr, length uint64, _ memcache.Access) (any, error) {
	p, err := h.g.c.hostPointer(addr, length)
	if err != nil {
		return nil, err
	}
	h.g.Regs.Add(1)
	return h.g.Dev.MapHost(p, length)
}

func (h hostMapper) Deregister(_, _ uint64, v any) error { return v.(*dma.HostMapping).Unmap() }

type exporter struct{ g *Device }

func (x exporter) Register(addr, length uint64, _ memcache.Access) (any, error) {
	ent, ok := x.g.Types.Lookup(addr, length)
	if !ok {
		return nil, gxerr.New(gxerr.Invalid, "not a device buffer", nil)
	}
	m := ent.Owner.(*Mem)
	return x.g.Dev.ExportDMABuf(m.DMem, 0, m.DMem.AllocSize())
}

func (x exporter) Deregister(_, _ uint64, v any) error { return v.(*dma.DMABuf).Close() }

// AddDevice adds an opened device (sim: its emulator, or nil) as
// Gaudi(len(Devs)).
func (c *Copier) AddDevice(d *dma.Device, sim *hlsim.Device) *Device {
	return c.addDevice(d, sim, dma.NodeInfo{}, nil)
}

// addDevice is AddDevice with the device's node and how to open it again
// after a reset (reopen.go).
func (c *Copier) addDevice(d *dma.Device, sim *hlsim.Device, node dma.NodeInfo, open Opener) *Device {
	c.devMu.Lock()
	g := c.newDevice(d, sim, len(c.Devs))
	g.Node, g.open = node, open
	c.Devs = append(c.Devs, g)
	n := len(c.Devs)
	c.devMu.Unlock()
	// At most one drain per (device, direction) and one for host copies
	// run at a time: the pool must hold them all.
	c.pool.Tune(max(c.cfg.Workers, NumDirs*n+1))
	if err := d.ResetErr(); err != nil {
		c.lostDevice(g, err) // reset before its hook could find it
	}
	return g
}

// newDevice builds Gaudi(idx) on d.
func (c *Copier) newDevice(d *dma.Device, sim *hlsim.Device, idx int) *Device {
	cfg := &c.cfg
	g := &Device{c: c, Idx: idx, Dev: d, Sim: sim, Types: memcache.NewTypeCache(), cbs: d.NewCBPool(cfg.CBSize, cbPoolSize)}
	g.win.init()
	g.getCB, g.putCB = g.cbs.Get, g.cbs.Put
	g.progress = d.Progress
	g.log = c.log.With().Int("dev", g.Idx).Str("node", d.Name()).Logger()
	for i := range g.queues {
		g.queues[i] = queue.New[*Job](cfg.QueueDepth, c.mode)
	}
	g.dirQs = [NumDirs][]uint32{dirH2D: d.H2DQueues(), dirD2H: d.D2HQueues(), dirD2D: d.D2DQueues()}
	for dir := range g.sizer {
		z := &g.sizer[dir]
		z.ok = d.InitCSBuilder(&z.b, dma.CSOptions{Queues: g.dirQs[dir], CBSize: cfg.CBSize, PieceSize: cfg.ChunkSize, NewCB: g.getCB}) == nil
	}
	g.HostMaps, _ = memcache.New(memcache.Config{
		Registrar: hostMapper{g}, MaxRegions: cfg.RegMaxRegions, MaxBytes: cfg.RegMaxBytes,
		Logger: g.log,
	})
	g.Exports, _ = memcache.New(memcache.Config{Registrar: exporter{g}, Logger: g.log})
	// dma.Device.WaitCS tells a retired CS from one still running, also
	// across a device reset. A CS left unpolled (a waiter descheduled)
	// is polled by the Track of the CS retireHorizon after it, before
	// the driver can forget its outcome (cq's horizon.go).
	g.Actor = cq.NewDeviceActor(d.Name(), d, cq.ActorConfig{
		Spin:          cfg.PollSpin,
		RetireHorizon: retireHorizon,
		OnDeadline:    g.checkHealth,
		Logger:        cfg.BaseLogger,
	})
	return g
}

func (g *Device) checkHealth() {
	st, err := g.Dev.Status()
	if err != nil || st != dma.StatusOperational {
		g.log.Warn().Err(err).Uint32("status", uint32(st)).Msg("operation deadline missed; device not operational")
		return
	}
	g.log.Warn().Msg("operation deadline missed; device reports operational")
}

// inlineMaxOutstanding: a device with this many command submissions in
// flight gets new jobs through its workers, never on the caller's
// goroutine, which could then wait for room (completion tracking, the
// driver's completion slots). Such a device is busy anyway: a hand-off
// costs it nothing.
const inlineMaxOutstanding = 32

// retireHorizon is cq.ActorConfig.RetireHorizon for every device: half
// the driver's CS outcome store (HL_CS_OUTCOME_HISTORY_LEN, 256).
const retireHorizon = 128

// enqueue hands a job to a direction's queue. When the queue is idle
// (empty, no drain scheduled) and the device not loaded, the caller takes
// the drain's place and turns the job into command submissions on its own
// goroutine: a single copy then pays no goroutine hand-off before the
// device sees it. Else the job is pushed and a worker drains it.
func (g *Device) enqueue(ctx context.Context, dir int, j *Job) error {
	q := g.queues[dir]
	if q.Len() == 0 && g.Actor.Outstanding() < inlineMaxOutstanding && g.c.HookProcess.Load() == nil &&
		g.sched[dir].CompareAndSwap(false, true) {
		// inline.enter fails once Close began: Close waits for the
		// inline runs that entered before it releases the device.
		if q.Closed() || !g.c.inline.enter() {
			g.sched[dir].Store(false)
			return g.closedErr()
		}
		g.runInline(dir, j)
		return nil
	}
	if err := g.c.push(ctx, q, j, g.queueName(dir)); err != nil {
		if err == gxerr.Closed {
			return g.closedErr()
		}
		return err
	}
	g.schedule(dir)
	return nil
}

func (g *Device) queueName(dir int) string { return fmt.Sprintf("gaudi%d %s", g.Idx, dirNames[dir]) }

// runInline processes one job on the caller's goroutine, holding the
// drain role of (g, dir); jobs queued meanwhile go to a worker. A panic
// fails the job's ops no CS or staging task owns yet, as in drain.
func (g *Device) runInline(dir int, j *Job) {
	g.c.st.InlineSubmits.Add(1)
	defer func() {
		defer g.c.inline.exit()
		if r := recover(); r != nil {
			g.c.failOps([]*Job{j}, r)
		}
		g.sched[dir].Store(false)
		if g.queues[dir].Len() > 0 {
			g.schedule(dir)
		}
	}()
	jobs := [1]*Job{j}
	g.process(dir, jobs[:])
}

func (g *Device) schedule(dir int) {
	if g.sched[dir].CompareAndSwap(false, true) {
		if err := g.c.submitDevTask(func() { g.drain(dir) }); err != nil {
			g.sched[dir].Store(false)
			g.log.Debug().Err(err).Msg("worker pool refused drain task")
		}
	}
}

// drain is a worker task: it empties a queue in batches and submits them.
// A panic fails the ops of the popped jobs that no CS or staging task owns
// yet (releasing their buffers), and the queue is rescheduled.
func (g *Device) drain(dir int) {
	buf := make([]*Job, 64)
	var cur []*Job
	defer func() {
		if r := recover(); r != nil {
			g.c.failOps(cur, r)
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

// streams are the device queues the command submissions of refs, going
// in direction dir, are spread over, and whether they should use only
// one of them (dma.CSOptions.OneQueue). A lone copy of one piece on an
// idle device takes one queue, the same as the lone copy before it:
// spreading gains it nothing, and on an emulated device the other
// queues' engines then park instead of spinning for work on the cores
// the copy needs.
func (g *Device) streams(dir int, refs []ref) (qs []uint32, one bool) {
	qs = g.dirQs[dir]
	one = len(qs) > 1 && len(refs) == 1 && g.Actor.Outstanding() == 0 &&
		(g.c.cfg.ChunkSize == 0 || refs[0].o.n() <= g.c.cfg.ChunkSize)
	return qs, one
}

// ref names one op of a job.
type ref struct {
	j *Job
	o *Op
}

type routeKey struct {
	g   *Device
	dir int
}

// process turns queued jobs into command submissions. Ops that belong to
// another (device, direction) — batches mix them — are handed to that
// device's processing from this worker.
func (g *Device) process(dir int, jobs []*Job) {
	if h := g.c.HookProcess.Load(); h != nil {
		(*h)()
	}
	n := 0
	for _, j := range jobs {
		n += len(j.Ops)
	}
	mine := make([]ref, 0, n) // usually every op is this queue's
	var others map[routeKey][]ref
	for _, j := range jobs {
		if !j.claim() || g.c.dropCanceled(j) {
			continue
		}
		for i := range j.Ops {
			o := &j.Ops[i]
			rg, rdir := route(o)
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

// inlineRuns counts the jobs processed on their callers' goroutines
// (runInline), so that Close can wait for them: they build command
// buffers and submit to the device that Close then releases. One atomic
// word holds the count and whether close began (inlineClosed): a run's
// enter and exit cost an atomic operation each, no lock.
type inlineRuns struct {
	state atomic.Int64
	done  atomic.Pointer[chan struct{}] // closed by the last exit after close began
}

const inlineClosed = 1 << 62

// enter registers an inline run; false once close began.
func (r *inlineRuns) enter() bool {
	for {
		v := r.state.Load()
		if v&inlineClosed != 0 {
			return false
		}
		if r.state.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

func (r *inlineRuns) exit() {
	if r.state.Add(-1) == inlineClosed { // the last run since close began
		close(*r.done.Load())
	}
}

// close refuses new inline runs and waits for those that entered; a
// second close waits as the first did.
func (r *inlineRuns) close() {
	done := make(chan struct{})
	// done is stored before the flag: an exit that sees the flag finds it.
	if r.done.CompareAndSwap(nil, &done) && r.state.Add(inlineClosed) == inlineClosed {
		close(done) // none running
	}
	<-*r.done.Load()
}
