// Package copier is the engine's copy machinery: per-device queues and
// the workers that drain them into command submissions, the completion of
// those submissions, host workers for large host-to-host copies, copies
// between two devices staged through host memory, and the devices with
// their caches (host mappings, DMA-BUF exports).
//
// The engine validates a copy, takes references to its buffers and hands
// the copier a Job; the copier drops the references and completes the
// Job's Future when the hardware is done with the memory. Buffers are
// Mems the engine's buffers embed, and jobs and ops are concrete types:
// the per-copy path has no allocation or indirect call of its own.
package copier

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/panjf2000/ants/v2"
	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/memcopy"
	"github.com/gxfer/gxfer/memcache"
	"github.com/gxfer/gxfer/queue"
)

// Config configures a Copier (the engine's Config, defaults applied).
type Config struct {
	Logger     zerolog.Logger // the engine's logger (component "engine")
	BaseLogger zerolog.Logger // Config.Logger, for the layers below
	Workers    int
	QueueDepth int
	// FailWhenFull: a submission finding its queue full fails at once
	// (else it waits for room).
	FailWhenFull bool
	CBSize       int
	// MaxOpsPerCS, ChunkSize, ParallelCopyMin: engine.Config's.
	MaxOpsPerCS     int
	ChunkSize       uint64
	ParallelCopyMin int
	InlineHostMax   int
	// HostCopy copies host memory (nil: one from this machine, splitting
	// from ParallelCopyMin).
	HostCopy   *memcopy.Copier
	PollSpin   time.Duration
	CloseGrace time.Duration
	// The host-mapping caches' limits; RegCacheOff unmaps after every use.
	RegMaxRegions int
	RegMaxBytes   uint64
	RegCacheOff   bool

	Gate  *datapath.Gate // host workers' copies enter it
	Stats *Counters
	// AllocHost and FreeHost make and free the bounce buffers of copies
	// between devices.
	AllocHost func(n int) (*Mem, error)
	FreeHost  func(m *Mem) error
	// Destroy runs when a copy dropped the last reference of a freed
	// buffer.
	Destroy func(m *Mem)
}

// stageTasks bounds the copies between devices staged at a time.
const stageTasks = 8

// clock is the time since c.t0 on the monotonic clock alone (a job's
// start and its latency: half the cost of time.Now, which reads the wall
// clock too).
func (c *Copier) clock() time.Duration { return time.Since(c.t0) }

// Copier runs the engine's copies. Its methods are safe for concurrent
// use.
type Copier struct {
	t0  time.Time // clock's origin
	cfg Config
	log zerolog.Logger
	st  *Counters

	pool    *ants.Pool     // drain tasks: never wait on other tasks
	stageQ  stageQueue     // copies between devices waiting for a staging task
	stages  sync.WaitGroup // copies between devices not ended
	inline  inlineRuns     // device jobs processed on their callers' goroutines
	runtime sync.WaitGroup // copies handed to runtimes' copiers
	// rtCtx is the parent context of runtime copies, canceled by
	// WaitRuntime once CloseGrace has passed.
	rtCtx    context.Context
	rtCancel context.CancelFunc
	host     *hostPath
	mode     queue.Mode // of every queue
	// stopping: Stop has begun (a CS the device does not take is given
	// up: csRec.stopSubmit).
	stopping atomic.Bool
	// stragglers: Stop gave up waiting for the workers; devTasks counts
	// the device queues' drain tasks not ended (CloseDevices waits for
	// them; host copies are waited for by Config.Gate).
	stragglers atomic.Bool
	devTasks   atomic.Int64

	// Types maps host ranges to the *Mem of the buffers there (the
	// memory-type cache).
	Types *memcache.TypeCache

	// Devs are the devices, Gaudi(i) being Devs[i]; Sims the emulators
	// behind emulated ones (closed last). A device reopened after a reset
	// replaces its lost Device in Devs under devMu (reopen.go): read Devs
	// through Device(i) or devList where a reset may happen.
	Devs  []*Device
	Sims  []*hlsim.Device
	devMu sync.RWMutex
	re    reopens

	// HookProcess (tests) runs in workers before they process jobs.
	HookProcess atomic.Pointer[func()]
	// HookSubmitted (tests) runs after a CS ioctl, before its Track.
	HookSubmitted atomic.Pointer[func(seq uint64)]
}

type antsLogger struct{ l zerolog.Logger }

func (a antsLogger) Printf(format string, args ...any) { a.l.Debug().Msgf(format, args...) }

// New starts the worker pool and the host path; devices are added by
// OpenDevices or AddDevice.
func New(cfg Config) (*Copier, error) {
	// AddDevice builds the host-mapping caches from these and cannot
	// fail: a negative MaxRegions (memcache.New refuses it) is refused
	// here.
	if cfg.RegMaxRegions < 0 {
		return nil, gxerr.New(gxerr.Invalid, fmt.Sprintf("Config.RegCache.MaxRegions %d is negative", cfg.RegMaxRegions), nil)
	}
	if cfg.HostCopy == nil {
		cfg.HostCopy = memcopy.New(memcopy.Config{ParallelMin: cfg.ParallelCopyMin})
	}
	c := &Copier{t0: time.Now(), cfg: cfg, log: cfg.Logger, mode: queue.Wait, st: cfg.Stats, Types: memcache.NewTypeCache()}
	if cfg.FailWhenFull {
		c.mode = queue.FailFast
	}
	c.rtCtx, c.rtCancel = context.WithCancel(context.Background())
	c.re.stop = make(chan struct{})
	var err error
	c.pool, err = ants.NewPool(cfg.Workers, ants.WithPanicHandler(c.onPanic), ants.WithLogger(antsLogger{c.log}))
	if err != nil {
		return nil, fmt.Errorf("gxfer: worker pool: %w", err)
	}
	c.host = newHostPath(c)
	return c, nil
}

// Device is Gaudi(i), or an ErrNoDevice error.
func (c *Copier) Device(i int) (*Device, error) {
	c.devMu.RLock()
	defer c.devMu.RUnlock()
	if i < 0 || i >= len(c.Devs) {
		return nil, gxerr.New(gxerr.NoDevice, fmt.Sprintf("gaudi%d (engine has %d)", i, len(c.Devs)), nil)
	}
	return c.Devs[i], nil
}

// StageTasks is how many copies between devices are staged at a time.
func (c *Copier) StageTasks() int { return stageTasks }

// onPanic logs and counts a worker panic. Workers recover their own panics
// (failing the operations they held); this is also the pool's handler.
func (c *Copier) onPanic(p any) {
	c.log.Error().Str("panic", fmt.Sprint(p)).Msg("worker panicked")
	c.st.Panics.Add(1)
}

// push queues a job, mapping the queue's errors to the engine's: a full
// queue (or a context that ended while waiting for room) is counted as a
// queue-full event.
func (c *Copier) push(ctx context.Context, q *queue.Queue[*Job], j *Job, name string) error {
	err := q.Push(ctx, j)
	switch {
	case err == nil:
		c.watchQueued(j)
		return nil
	case errors.Is(err, queue.ErrClosed):
		return gxerr.Closed
	case errors.Is(err, queue.ErrFull):
		c.st.QueueFull.Add(1)
		return gxerr.New(gxerr.QueueFull, name, nil)
	}
	c.st.QueueFull.Add(1)
	return gxerr.Ctx("waiting for room in queue "+name, err)
}

// submitDevTask runs a device queue's drain task on the pool, counted in
// c.devTasks until it ends.
func (c *Copier) submitDevTask(fn func()) error {
	c.devTasks.Add(1)
	err := c.pool.Submit(func() {
		defer c.devTasks.Add(-1)
		fn()
	})
	if err != nil {
		c.devTasks.Add(-1)
	}
	return err
}

// failOps fails the ops of jobs a panicking worker held that no CS or
// staging task owns yet (releasing their buffers).
func (c *Copier) failOps(jobs []*Job, r any) {
	c.onPanic(r)
	perr := gxerr.New(gxerr.Panic, fmt.Sprint(r), nil)
	for _, j := range jobs {
		j.claim() // one the panic came before the worker took
		if j.state.Load() == jobExpired {
			continue // its ops ended in its queue
		}
		for i := range j.Ops {
			if !j.Ops[i].handed {
				c.finishOp(j, &j.Ops[i], perr)
			}
		}
	}
}

// failQueued fails every job left in q.
func (c *Copier) failQueued(q *queue.Queue[*Job], err error) {
	buf := make([]*Job, 64)
	for {
		n := q.PopBatch(buf)
		if n == 0 {
			return
		}
		for _, j := range buf[:n] {
			if !j.claim() {
				continue // expired
			}
			for i := range j.Ops {
				c.finishOp(j, &j.Ops[i], err)
			}
		}
	}
}

// Stop ends the copy machinery (Engine.Close): it closes the queues,
// waits for the workers, fails what is still queued with ErrClosed, gives
// the command submissions on the devices up to CloseGrace, and waits for
// the staging tasks. The devices stay open (CloseDevices). Like the other
// closing methods, it does nothing on a nil Copier (New failed).
func (c *Copier) Stop() {
	if c == nil {
		return
	}
	c.stopping.Store(true)
	c.stopReopens() // Devs stays as it is from here on
	for _, g := range c.Devs {
		for _, q := range g.queues {
			q.Close()
		}
	}
	c.host.q.Close()
	c.inline.close() // the callers' own submissions, like the workers' below
	// A second more than the grace, saturated: CloseGrace may be as long
	// as a Duration holds ("wait for the work"), and the sum overflowed
	// to a negative timeout, which gave up on the workers at once.
	release := c.cfg.CloseGrace
	if release <= math.MaxInt64-time.Second {
		release += time.Second
	}
	if err := c.pool.ReleaseTimeout(release); err != nil {
		c.log.Warn().Err(err).Msg("workers did not stop in time")
		c.stragglers.Store(true)
	}
	for _, g := range c.Devs {
		for _, q := range g.queues {
			c.failQueued(q, gxerr.Closed)
		}
		g.Actor.Close(c.cfg.CloseGrace)
		// A CS still running after the grace stops the device now: the
		// staging tasks waited for below end only once it retires.
		g.closeAbandoned()
	}
	c.failQueued(c.host.q, gxerr.Closed)
	c.host.actor.Close()
	// Staging tasks end once their inner copies have. A worker that
	// outlived the pool's release gets ErrClosed for a copy it stages
	// from here on.
	c.closeStaging()
	c.stages.Wait()
}

// CloseDevices closes the device contexts, so that nothing the hardware
// may still touch is released before it stops. After a Stop that gave up
// waiting for a worker, it closes them the way that stops them first
// (dma.Device.CloseRunning): the worker may have submitted a CS after the
// completion actor closed, which nobody tracks, and which is still
// running as the device's memory and mappings are released. It then
// waits for such workers of the device queues (Config.Gate waits for the
// host copies), whose calls on the closed devices fail at once
// (a submission retrying on a full queue gives up when its device
// closes), so that the futures of the jobs they hold have resolved, with
// ErrClosed, when Close returns.
func (c *Copier) CloseDevices() error {
	if c == nil {
		return nil
	}
	closeDev := (*dma.Device).Close
	straggling := c.stragglers.Load()
	if straggling {
		closeDev = (*dma.Device).CloseRunning
	}
	var errs []error
	for _, g := range c.Devs {
		errs = append(errs, closeDev(g.Dev), g.closeErr())
	}
	if straggling {
		for c.devTasks.Load() > 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	return errors.Join(errs...)
}

// CloseCaches releases the caches and pooled command buffers (after the
// buffers are gone; releases are then no-ops on the driver side).
func (c *Copier) CloseCaches() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, g := range c.Devs {
		errs = append(errs, g.HostMaps.Close(), g.Exports.Close(), g.cbs.Close())
	}
	return errors.Join(errs...)
}

// CloseSims closes the emulators (last).
func (c *Copier) CloseSims() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, s := range c.Sims {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// AddHost records host memory m in the memory-type cache.
func (c *Copier) AddHost(m *Mem) error {
	return c.Types.Insert(m.Addr, m.Size, memcache.MemHost, -1, m)
}

// hostPointer is the pointer to host range [addr, addr+n) of a live
// buffer, derived from the buffer's own pointer.
func (c *Copier) hostPointer(addr, n uint64) (unsafe.Pointer, error) {
	ent, ok := c.Types.Lookup(addr, n)
	if !ok {
		return nil, gxerr.New(gxerr.Invalid, fmt.Sprintf("host range %#x+%d is not a buffer", addr, n), nil)
	}
	m := ent.Owner.(*Mem)
	return unsafe.Add(m.Ptr, addr-m.Addr), nil
}

// Forget drops m from the caches (the buffer is being freed): host
// memory's mappings into the devices and its type-cache entry, device
// memory's type-cache entry and export.
func (c *Copier) Forget(m *Mem) {
	if m.Gaudi {
		m.Device.Types.Remove(m.Addr, m.Size)
		m.Device.Exports.Invalidate(m.Addr, m.Size)
		return
	}
	for _, g := range c.DevList() {
		g.HostMaps.Invalidate(m.Addr, m.Size)
	}
	c.Types.Remove(m.Addr, m.Size)
}
