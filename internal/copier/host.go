package copier

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/memcopy"
	"github.com/gxfer/gxfer/queue"
)

// hostPath runs host-to-host copies too large to run inline: workers copy
// (large copies split across cores) and the host actor completes futures.
type hostPath struct {
	c     *Copier
	q     *queue.Queue[*Job]
	sched atomic.Bool
	actor *cq.HostActor
}

func newHostPath(c *Copier) *hostPath {
	return &hostPath{c: c, q: queue.New[*Job](c.cfg.QueueDepth, c.mode), actor: cq.NewHostActor(c.cfg.QueueDepth)}
}

func (h *hostPath) enqueue(ctx context.Context, j *Job) error {
	if err := h.c.push(ctx, h.q, j, "host"); err != nil {
		return err
	}
	h.schedule()
	return nil
}

func (h *hostPath) schedule() {
	if h.sched.CompareAndSwap(false, true) {
		if err := h.c.pool.Submit(h.drain); err != nil {
			h.sched.Store(false)
		}
	}
}

func (h *hostPath) drain() {
	c := h.c
	buf := make([]*Job, 16)
	var cur []*Job
	defer func() {
		if r := recover(); r != nil {
			c.failOps(cur, r)
			h.sched.Store(false)
			if h.q.Len() > 0 {
				h.schedule()
			}
		}
	}()
	for {
		n := h.q.PopBatch(buf)
		if n == 0 {
			h.sched.Store(false)
			if h.q.Len() > 0 && h.sched.CompareAndSwap(false, true) {
				continue
			}
			return
		}
		cur = buf[:n]
		for _, j := range cur {
			if !j.claim() {
				continue // expired
			}
			for i := range j.Ops {
				o := &j.Ops[i]
				err := jobNotStarted(j)
				if err == nil {
					if hook := c.HookProcess.Load(); hook != nil {
						(*hook)()
					}
					err = c.gatedHostCopy(j, o.Dst, o.Src)
				}
				o.handed = true
				jj, oo := j, o
				h.actor.Post(cq.HostCompletion{F: j.Fut, Idx: o.Idx, Err: err, Then: func() {
					c.opRelease(jj, oo)
					if !jj.Internal {
						c.st.Record(c.clock()-jj.Start, oo.n(), err)
					}
				}})
			}
		}
		cur = nil
		clear(buf[:n])
	}
}

// CopyInline runs a host-to-host copy of at most Config.InlineHostMax
// bytes, whose buffer references the caller holds, on the caller's
// goroutine, already admitted by the close gate; false (nothing done):
// the copy is not one, or it must not start (deadline or ctx's passed:
// pastDeadline; the caller checked ctx.Err just before), which Copy then
// reports as every path does.
func (c *Copier) CopyInline(ctx context.Context, dst, src Slice, deadline time.Time) bool {
	if dst.M.Gaudi || src.M.Gaudi || int(src.N) > c.cfg.InlineHostMax || pastDeadline(ctx, deadline) != nil {
		return false
	}
	c.cfg.Gate.Hook()
	c.cfg.HostCopy.Copy(dst.HostBytes(), src.HostBytes())
	c.release(dst.M)
	c.release(src.M)
	c.st.RecordInline(src.N)
	return true
}

// gatedHostCopy is HostCopy inside the close gate (a worker may outlive
// Close's wait for the pool): ErrClosed once Close has begun. A copy of
// j, which has a deadline or a ctx that can end, large enough to be
// copied in pieces (memcopy.CopyStop) stops between two pieces once its
// deadline has passed (ErrTimeout) or its ctx has ended (ErrCanceled or
// ErrTimeout); the content of dst is then undefined.
func (c *Copier) gatedHostCopy(j *Job, dst, src Slice) error {
	if !c.cfg.Gate.Enter() {
		return gxerr.Closed
	}
	defer c.cfg.Gate.Exit()
	c.cfg.Gate.Hook()
	return c.hostCopyStop(j.Ctx, dst, src, j.Deadline)
}

// hostCopyStop is HostCopy for a copy with a ctx (nil: none) or a
// deadline (zero: none): one large enough to be copied in pieces
// (memcopy.CopyStop, over 1 MiB) stops between two pieces once its
// deadline has passed (ErrTimeout) or ctx has ended (ErrCanceled or
// ErrTimeout), the content of dst then undefined. Smaller copies read no
// clock (and allocate no stop function).
func (c *Copier) hostCopyStop(ctx context.Context, dst, src Slice, deadline time.Time) error {
	if (deadline.IsZero() && ctx == nil) || !memcopy.Pieces(int(src.N)) {
		c.HostCopy(dst, src)
		return nil
	}
	stop := func() bool {
		return (!deadline.IsZero() && !time.Now().Before(deadline)) || (ctx != nil && ctx.Err() != nil)
	}
	if c.cfg.HostCopy.CopyStop(dst.HostBytes(), src.HostBytes(), stop) == int(src.N) {
		return nil
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return gxerr.New(gxerr.Timeout, "deadline passed during the copy: destination partly written", nil)
	}
	return gxerr.Ctx("copy stopped part way: destination partly written", ctx.Err())
}

// HostCopy copies src to dst (memmove semantics) with Config.HostCopy:
// the kernel chosen by size, large non-overlapping copies split across
// cores.
func (c *Copier) HostCopy(dst, src Slice) {
	d, s := dst.HostBytes(), src.HostBytes()
	if Overlaps(dst, src) {
		copy(d, s)
		return
	}
	c.cfg.HostCopy.Copy(d, s)
}
