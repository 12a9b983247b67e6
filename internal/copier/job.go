package copier

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/gxerr"
)

// Job is one submission: a single copy or a batch's copies.
type Job struct {
	Ops      []Op
	one      [1]Op // Ops' backing for a job of one copy
	Fut      *Future
	Start    time.Duration // Copier.clock at submission
	Deadline time.Time
	// Internal: submitted by the engine for an operation that holds the
	// buffers (no references dropped, nothing counted; see CopyInternal).
	Internal bool
	// Ctx, if set (a Copy whose ctx can end), drops the job's ops not yet
	// in a command submission once it ends (see dropCanceled).
	Ctx context.Context

	// state says who owns a queued job: a worker takes it (claim), or
	// its deadline or ctx ends it while it waits in its queue (expire).
	state    atomic.Uint32
	expiry   atomic.Pointer[time.Timer]
	ctxWatch atomic.Pointer[func() bool] // context.AfterFunc's stop
}

const (
	jobQueued  = iota
	jobTaken   // a worker (or Stop) took it from its queue
	jobExpired // its deadline passed or its ctx ended while it was queued: its ops ended
)

// claim takes a job popped from its queue (or run inline) for a worker:
// false when it expired meanwhile, and its ops have ended.
func (j *Job) claim() bool {
	if !j.state.CompareAndSwap(jobQueued, jobTaken) {
		return false
	}
	j.unwatch()
	return true
}

// unwatch stops the watches of a job no longer queued.
func (j *Job) unwatch() {
	if t := j.expiry.Load(); t != nil {
		t.Stop()
	}
	if stop := j.ctxWatch.Load(); stop != nil {
		(*stop)()
	}
}

// watchQueued ends j, just queued, at its deadline (ErrTimeout) or when
// its ctx ends (ErrCanceled or ErrTimeout), unless a worker has taken it
// from its queue by then. A worker busy with the jobs ahead (a CS whose
// copies have no deadline waiting for a completion slot, say) would
// otherwise notice only when it gets to j.
func (c *Copier) watchQueued(j *Job) {
	if !j.Deadline.IsZero() {
		j.expiry.Store(time.AfterFunc(time.Until(j.Deadline), func() {
			c.expire(j, gxerr.New(gxerr.Timeout, "deadline passed while queued", nil))
		}))
	}
	if j.Ctx != nil {
		ctx := j.Ctx
		stop := context.AfterFunc(ctx, func() {
			c.expire(j, gxerr.Ctx("copy dropped before it started", ctx.Err()))
		})
		j.ctxWatch.Store(&stop)
	}
	if j.state.Load() != jobQueued {
		// Taken (or ended) meanwhile: claim may have looked for the
		// watches before they were stored, and a ctx that never ends
		// would keep its AfterFunc registered for good.
		j.unwatch()
	}
}

// expire ends the ops of j, still queued, with err, unless a worker has
// claimed it.
func (c *Copier) expire(j *Job, err error) {
	if !j.state.CompareAndSwap(jobQueued, jobExpired) {
		return
	}
	j.unwatch()
	for i := range j.Ops {
		c.finishOp(j, &j.Ops[i], err)
	}
}

// oneOp is a job of one copy for f, its op in the job's own array.
func oneOp(f *Future, dst, src Slice) *Job {
	j := f.ownJob()
	j.Fut = f
	j.one[0] = Op{Dst: dst, Src: src}
	j.Ops = j.one[:1]
	return j
}

// Op is one copy.
type Op struct {
	Dst, Src Slice
	Idx      int  // index in the job's future (per-op status)
	handed   bool // owned by a CS or a staging task, or finished (worker-local)
}

func (o *Op) n() uint64 { return o.Src.N }

// Directions of device copies; each (device, direction) has its own queue.
const (
	dirH2D = iota
	dirD2H
	dirD2D
	NumDirs
)

var dirNames = [NumDirs]string{"h2d", "d2h", "d2d"}

// route says which device queue handles a copy; nil for host-only copies.
// Copies between two devices return the source device and dirD2D.
func route(o *Op) (*Device, int) {
	dg, sg := o.Dst.M.Gaudi, o.Src.M.Gaudi
	switch {
	case dg && sg:
		return o.Src.M.Device, dirD2D
	case dg:
		return o.Dst.M.Device, dirH2D
	case sg:
		return o.Src.M.Device, dirD2H
	}
	return nil, -1
}

func crossDevice(o *Op) bool {
	return o.Dst.M.Gaudi && o.Src.M.Gaudi && o.Dst.M.Device != o.Src.M.Device
}

// Submit queues a job, routed by its first op (a batch's device job may
// mix routes; the worker sorts them out). Copies between two devices go
// to the source device's queue and are staged from there. The job's ops
// hold references to their buffers (unless Internal), dropped as they
// end; on an error nothing was queued and they are the caller's.
func (c *Copier) Submit(ctx context.Context, j *Job) error {
	g, dir := route(&j.Ops[0])
	if g == nil {
		return c.host.enqueue(ctx, j)
	}
	return g.enqueue(ctx, dir, j)
}

// Copy queues one copy whose buffer references the caller holds, to
// complete f (initialized for one operation); ctx, if it can end, drops it
// while it is queued. On an error nothing was queued and the references
// are still the caller's.
func (c *Copier) Copy(ctx context.Context, f *Future, dst, src Slice, deadline time.Time) error {
	j := oneOp(f, dst, src)
	j.Start, j.Deadline = c.clock(), deadline
	if ctx.Done() != nil {
		j.Ctx = ctx
	}
	return c.Submit(ctx, j)
}

// SubmitBatch submits a batch's copies, whose buffer references the
// caller holds (Idx: their index in f): the device copies (also between
// devices) in one job pushed to one queue, so that the only step that can
// fail (then nothing ran and the references are still the caller's) comes
// before anything runs; then the host-to-host copies, run here. ctx, if it
// can end, drops the device copies still queued when it ends, and stops a
// large host-to-host copy part way (hostCopyStop), as the deadline does;
// the host-to-host copies are not run at all when ctx has ended or a
// deadline (deadline or ctx's) has passed once the device copies are
// queued (notStarted).
func (c *Copier) SubmitBatch(ctx context.Context, f *Future, ops []Op, deadline time.Time) error {
	now := c.clock()
	var dev *Job
	var host []Op
	for i := range ops {
		o := &ops[i]
		if !o.Dst.M.Gaudi && !o.Src.M.Gaudi {
			host = append(host, *o)
			continue
		}
		if dev == nil {
			// Room for every op: usually all are device copies.
			dev = f.ownJob()
			dev.Fut, dev.Start, dev.Deadline = f, now, deadline
			if n := len(ops) - i; n == 1 {
				dev.Ops = dev.one[:0]
			} else {
				dev.Ops = make([]Op, 0, n)
			}
			if ctx.Done() != nil {
				dev.Ctx = ctx
			}
		}
		dev.Ops = append(dev.Ops, *o)
	}
	if dev != nil {
		if err := c.Submit(ctx, dev); err != nil {
			return err
		}
	}
	c.st.Submitted.Add(uint64(len(ops)))
	// Host copies whose deadline (the option's or ctx's) has passed, or
	// whose ctx has ended, by now fail with ErrTimeout or ErrCanceled and
	// copy nothing, as the device copies and host workers' copies do;
	// looked at once for the batch. A large one (copied in pieces) stops
	// between two pieces once the deadline passes or ctx ends while it
	// runs, as a host worker's does.
	var expired error
	if len(host) > 0 {
		expired = notStarted(ctx, deadline)
	}
	var hostCtx context.Context
	if ctx.Done() != nil {
		hostCtx = ctx
	}
	var lat time.Duration
	if expired != nil {
		lat = c.clock() - now
	}
	for i := range host {
		o := &host[i]
		if expired != nil {
			c.release(o.Dst.M)
			c.release(o.Src.M)
			c.st.Record(lat, o.n(), expired)
			f.Complete(o.Idx, expired)
			continue
		}
		c.cfg.Gate.Hook()
		err := c.hostCopyStop(hostCtx, o.Dst, o.Src, deadline)
		c.release(o.Dst.M)
		c.release(o.Src.M)
		if err != nil {
			c.st.Record(c.clock()-now, o.n(), err)
		} else {
			c.st.RecordInline(o.n())
		}
		f.Complete(o.Idx, err)
	}
	return nil
}

// notStarted is the error of a copy about to start whose ctx has ended
// (ErrCanceled or ErrTimeout, wrapping ctx's error) or whose deadline,
// deadline or ctx's, has passed (ErrTimeout; for ctx's also before ctx's
// own timer has fired); nil if none. It reads the clock only when there
// is a deadline, once.
func notStarted(ctx context.Context, deadline time.Time) error {
	if err := ctx.Err(); err != nil {
		return gxerr.Ctx("copy dropped before it started", err)
	}
	return pastDeadline(ctx, deadline)
}

// pastDeadline is notStarted's look at the deadlines only (deadline, and
// ctx's before its timer may have fired), for a caller that has just
// checked ctx.Err itself.
func pastDeadline(ctx context.Context, deadline time.Time) error {
	d, ok := ctx.Deadline()
	if !ok && deadline.IsZero() {
		return nil
	}
	now := time.Now()
	if !deadline.IsZero() && !now.Before(deadline) {
		return gxerr.New(gxerr.Timeout, "deadline passed before the copy started", nil)
	}
	if ok && !now.Before(d) {
		return gxerr.Ctx("deadline passed before the copy started", context.DeadlineExceeded)
	}
	return nil
}

// jobNotStarted is notStarted for an op of j: j's deadline, and j's ctx
// when it has one (nil: a ctx that cannot end).
func jobNotStarted(j *Job) error {
	ctx := j.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	return notStarted(ctx, j.Deadline)
}

// dropCanceled ends the ops of a job whose ctx has ended, none of them yet
// in a command submission (a device worker calls it on the jobs it pops),
// with ErrCanceled or ErrTimeout: nothing touched their memory, and the
// future resolves at once. It reports whether it dropped the job.
func (c *Copier) dropCanceled(j *Job) bool {
	if j.Ctx == nil || j.Ctx.Err() == nil {
		return false
	}
	err := gxerr.Ctx("copy dropped before it started", j.Ctx.Err())
	for i := range j.Ops {
		if o := &j.Ops[i]; !o.handed {
			c.finishOp(j, o, err)
		}
	}
	return true
}

// finishOp releases an op's buffer references, records it and completes
// its future entry. Every op ends through finishOp exactly once, or
// through opDone (at its deadline) and later opRelease (when the hardware
// is done with it).
func (c *Copier) finishOp(j *Job, o *Op, err error) {
	o.handed = true
	c.opRelease(j, o)
	c.opDone(j, o, err)
}

// opRelease drops the op's buffer references. Internal jobs hold none
// (their caller does): for them it is the second of the two completions
// their future counts, so that the future resolves only once the hardware
// is done with the memory (see CopyInternal).
func (c *Copier) opRelease(j *Job, o *Op) {
	if j.Internal {
		j.Fut.Complete(o.Idx, nil)
		return
	}
	c.release(o.Dst.M)
	c.release(o.Src.M)
}

// release drops a copy's reference to m.
func (c *Copier) release(m *Mem) { c.releaseN(m, 1) }

// releaseN drops n copies' references to m; the last one out of a freed
// buffer destroys it.
func (c *Copier) releaseN(m *Mem, n uint64) {
	if m.Refs.Add(-n) == FreedBit {
		c.cfg.Destroy(m)
	}
}

// opDone records the op and completes its future entry.
func (c *Copier) opDone(j *Job, o *Op, err error) {
	if !j.Internal {
		c.st.Record(c.clock()-j.Start, o.n(), err)
	}
	j.Fut.Complete(o.Idx, err)
}

// CopyInternal submits a copy on behalf of an operation that already
// holds both buffers (staging): no reference is taken and nothing is
// counted.
//
// Its future resolves only when the hardware is done with both slices,
// never earlier: a copy whose deadline passes while its command submission
// is still queued or running ends with ErrTimeout once the CS retires (or
// is ended by a reset or Close), not at the deadline. Its caller frees or
// reuses the memory (bounce buffers, staging pools) as soon as the future
// resolves, so internal memory lives, as user memory does, until the
// hardware is done with it. The future counts two completions: opDone
// (the result, possibly at the deadline) and opRelease (the retirement).
func (c *Copier) CopyInternal(dst, src Slice, deadline time.Time) *Future {
	j := oneOp(NewFuture(2), dst, src)
	j.Start, j.Deadline, j.Internal = c.clock(), deadline, true
	if err := c.Submit(context.Background(), j); err != nil {
		return Resolved(err)
	}
	return j.Fut
}
