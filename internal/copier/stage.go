package copier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/gxerr"
)

// StageChunk is the bounce-buffer size for copies between two devices.
const StageChunk = 4 << 20

// stage hands copies between two devices (refs: each job's ops next to
// each other) to the staging tasks: two pinned host bounce buffers per
// copy, the device-to-host DMA of chunk k+1 overlapping the host-to-device
// DMA of chunk k. The copies wait in order in the staging queue, which at
// most stageTasks goroutines run, so that the worker handing them over
// never blocks and a batch of many copies starts no goroutine per copy.
// The copies of one job share one timer (its deadline) and one watch of
// its ctx: a copy still waiting when ctx ends, or its deadline passes,
// ends at once (ErrCanceled or ErrTimeout), releasing its buffers. One
// taken once Stop has begun ends with ErrClosed, allocating nothing.
//
// A copy being staged ends with ErrTimeout at its deadline, but keeps its
// buffers (and the task its bounce buffers) until the DMAs it started have
// retired: the inner copies' futures resolve only then.
func (c *Copier) stage(refs []ref) {
	for len(refs) > 0 {
		k := 1
		for k < len(refs) && refs[k].j == refs[0].j {
			k++
		}
		c.stageJob(refs[0].j, refs[:k])
		refs = refs[k:]
	}
}

// stageGroup is the copies between devices of one job handed to staging
// together.
type stageGroup struct {
	c    *Copier
	j    *Job
	ops  []stagedOp
	left atomic.Int32 // ops not ended: the last one stops the watches
	// The job's deadline timer and ctx watch (context.AfterFunc's stop).
	timer   atomic.Pointer[time.Timer]
	ctxStop atomic.Pointer[func() bool]
}

// stagedOp is one copy of a stageGroup.
type stagedOp struct {
	g     *stageGroup
	o     *Op
	state atomic.Uint32 // stageWaiting, stageTaken or stageDropped
	ended atomic.Bool   // its result is given (opDone)
}

const (
	stageWaiting = iota
	stageTaken   // a staging task runs it
	stageDropped // ended while waiting
)

// stageQueue holds the copies waiting for a staging task, and counts the
// tasks (goroutines) running, at most stageTasks.
type stageQueue struct {
	mu      sync.Mutex
	waiting []*stagedOp
	running int
	// closed: Stop waits for the staged copies (Copier.stages); a copy
	// queued after that ends with ErrClosed, never adding to the count
	// Stop waits on (an Add racing with the Wait is a WaitGroup misuse).
	closed bool
}

// closeStaging refuses the staged copies queued from now on (Stop, before
// it waits for those queued before).
func (c *Copier) closeStaging() {
	c.stageQ.mu.Lock()
	c.stageQ.closed = true
	c.stageQ.mu.Unlock()
}

// errStageClosed is the error of a copy between devices that Stop ends
// before it starts.
func errStageClosed() error {
	return gxerr.New(gxerr.Closed, "the engine closed before the copy between devices started", nil)
}

// stageJob queues the copies (refs) of job j.
func (c *Copier) stageJob(j *Job, refs []ref) {
	q := &c.stageQ
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		err := errStageClosed()
		for _, rf := range refs {
			c.finishOp(j, rf.o, err)
		}
		return
	}
	c.stages.Add(len(refs))
	q.mu.Unlock()
	g := &stageGroup{c: c, j: j, ops: make([]stagedOp, len(refs))}
	for i, rf := range refs {
		rf.o.handed = true
		g.ops[i].g, g.ops[i].o = g, rf.o
	}
	g.left.Store(int32(len(refs)))
	if !j.Deadline.IsZero() {
		g.timer.Store(time.AfterFunc(time.Until(j.Deadline), func() {
			g.end(gxerr.New(gxerr.Timeout, "copy between devices: deadline passed", nil), true)
		}))
	}
	if ctx := j.Ctx; ctx != nil {
		stop := context.AfterFunc(ctx, func() {
			g.end(gxerr.Ctx("copy between devices not started", ctx.Err()), false)
		})
		g.ctxStop.Store(&stop)
	}
	if g.left.Load() == 0 {
		g.unwatch() // every op ended before the watches were stored
	}
	q.mu.Lock()
	for i := range g.ops {
		q.waiting = append(q.waiting, &g.ops[i])
	}
	start := min(stageTasks-q.running, len(q.waiting))
	q.running += start
	q.mu.Unlock()
	for range start {
		go c.stageRunner()
	}
}

// end ends the group's copies still waiting with err, and, if all, gives
// the others' result (their buffers kept until their DMAs retire).
func (g *stageGroup) end(err error, all bool) {
	for i := range g.ops {
		s := &g.ops[i]
		if s.state.CompareAndSwap(stageWaiting, stageDropped) {
			g.c.finishStaged(s, err)
		} else if all {
			s.done(err)
		}
	}
}

func (g *stageGroup) unwatch() {
	if t := g.timer.Load(); t != nil {
		t.Stop()
	}
	if stop := g.ctxStop.Load(); stop != nil {
		(*stop)()
	}
}

// done gives the op's result, once.
func (s *stagedOp) done(err error) {
	if s.ended.CompareAndSwap(false, true) {
		s.g.c.opDone(s.g.j, s.o, err)
	}
}

// finishStaged releases the op's buffers and gives its result (unless
// given), once it no longer waits or runs.
func (c *Copier) finishStaged(s *stagedOp, err error) {
	c.opRelease(s.g.j, s.o)
	s.done(err)
	if s.g.left.Add(-1) == 0 {
		s.g.unwatch()
	}
	c.stages.Done()
}

// stageRunner is a staging task: it runs the waiting copies in order until
// none is left.
func (c *Copier) stageRunner() {
	q := &c.stageQ
	for {
		q.mu.Lock()
		if len(q.waiting) == 0 {
			q.waiting = nil
			q.running--
			q.mu.Unlock()
			return
		}
		s := q.waiting[0]
		q.waiting[0] = nil
		q.waiting = q.waiting[1:]
		q.mu.Unlock()
		if s.state.CompareAndSwap(stageWaiting, stageTaken) {
			c.runStaged(s)
		}
	}
}

// runStaged stages one copy.
func (c *Copier) runStaged(s *stagedOp) {
	var err error
	defer func() {
		if r := recover(); r != nil {
			c.onPanic(r)
			err = gxerr.New(gxerr.Panic, fmt.Sprint(r), nil)
		}
		c.finishStaged(s, err)
	}()
	j := s.g.j
	ctx := j.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Err() != nil {
		err = gxerr.Ctx("copy between devices not started", ctx.Err())
		return
	}
	// Once Stop has begun the inner copies fail with ErrClosed: a copy
	// still waiting then fails before it allocates its bounce buffers
	// (every waiting copy allocated its two, only to fail).
	if c.stopping.Load() {
		err = errStageClosed()
		return
	}
	err = c.stageCopy(ctx, s.o, j.Deadline)
}

// stageCopy moves o chunk by chunk. When opCtx ends, no further chunk is
// started: the chunks in flight finish, and the copy ends with ErrCanceled
// or ErrTimeout (the destination holds the chunks done before). Once Stop
// has begun likewise, with ErrClosed: the device queues, still open until
// Stop closes them, would take the next chunk's inner copies.
func (c *Copier) stageCopy(opCtx context.Context, o *Op, deadline time.Time) (err error) {
	n := o.n()
	bsz := min(n, StageChunk)
	var bounce [2]*Mem
	for i := range bounce {
		if bounce[i], err = c.cfg.AllocHost(int(bsz)); err != nil {
			for _, b := range bounce[:i] {
				_ = c.cfg.FreeHost(b)
			}
			return err
		}
	}
	defer func() {
		for _, b := range bounce {
			_ = c.cfg.FreeHost(b)
		}
	}()
	ctx := context.Background()
	var pend [2]*Future
	var errs []error
	k := 0
	for off := uint64(0); off < n && len(errs) == 0; off += bsz {
		m := min(bsz, n-off)
		if err := opCtx.Err(); err != nil {
			errs = append(errs, gxerr.Ctx("copy between devices stopped", err))
			break
		}
		if c.stopping.Load() {
			err := errStageClosed()
			if off > 0 {
				err = gxerr.New(gxerr.Closed, "the engine closed while the copy between devices ran: destination partly written", nil)
			}
			errs = append(errs, err)
			break
		}
		if pend[k] != nil {
			if err := pend[k].Wait(ctx); err != nil {
				errs = append(errs, err)
				break
			}
		}
		bk := Slice{M: bounce[k], N: m}
		down := c.CopyInternal(bk, Slice{M: o.Src.M, Off: o.Src.Off + off, N: m}, deadline)
		if err := down.Wait(ctx); err != nil {
			errs = append(errs, err)
			break
		}
		pend[k] = c.CopyInternal(Slice{M: o.Dst.M, Off: o.Dst.Off + off, N: m}, bk, deadline)
		k ^= 1
	}
	for _, f := range pend {
		if f != nil {
			if err := f.Wait(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
