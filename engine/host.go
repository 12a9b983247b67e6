package engine

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/queue"
)

// hostPath runs host-to-host copies too large to run inline: workers copy
// (large copies split across cores) and the host actor completes futures.
type hostPath struct {
	e     *Engine
	q     *queue.Queue[*job]
	sched atomic.Bool
	actor *cq.HostActor
}

func newHostPath(e *Engine) *hostPath {
	return &hostPath{e: e, q: queue.New[*job](e.cfg.QueueDepth, e.cfg.queueMode()), actor: cq.NewHostActor(e.cfg.QueueDepth)}
}

func (h *hostPath) enqueue(ctx context.Context, j *job) error {
	if err := h.e.push(ctx, h.q, j, "host"); err != nil {
		return err
	}
	if h.sched.CompareAndSwap(false, true) {
		if err := h.e.pool.Submit(h.drain); err != nil {
			h.sched.Store(false)
		}
	}
	return nil
}

func (h *hostPath) drain() {
	buf := make([]*job, 16)
	var cur []*job
	defer func() {
		if r := recover(); r != nil {
			h.e.onPanic(r)
			perr := newErr(ErrPanic, fmt.Sprint(r), nil)
			for _, j := range cur {
				for i := range j.ops {
					if !j.ops[i].handed {
						h.e.finishOp(j, &j.ops[i], perr)
					}
				}
			}
			h.sched.Store(false)
			if h.q.Len() > 0 && h.sched.CompareAndSwap(false, true) {
				if err := h.e.pool.Submit(h.drain); err != nil {
					h.sched.Store(false)
				}
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
			for i := range j.ops {
				o := &j.ops[i]
				var err error
				switch {
				case !j.deadline.IsZero() && time.Now().After(j.deadline):
					err = newErr(ErrTimeout, "deadline passed while queued", nil)
				case j.ctx != nil && j.ctx.Err() != nil:
					err = ctxErr("copy dropped before it started", j.ctx.Err())
				default:
					if hook := h.e.hookProcess.Load(); hook != nil {
						(*hook)()
					}
					err = h.e.gatedHostCopy(o.dst, o.src)
				}
				o.handed = true
				jj, oo := j, o
				h.actor.Post(cq.HostCompletion{F: j.fut.completer(), Idx: o.idx, Err: err, Then: func() {
					h.e.opRelease(jj, oo)
					if !jj.internal {
						h.e.st.record(jj.start, oo.n(), err)
					}
				}})
			}
		}
		cur = nil
		clear(buf[:n])
	}
}

// gatedHostCopy is hostCopy inside the close gate (a worker may outlive
// Close's wait for the pool): ErrClosed once Close has begun.
func (e *Engine) gatedHostCopy(dst, src Slice) error {
	if !e.enter() {
		return ErrClosed
	}
	defer e.exit()
	e.gateHook()
	e.hostCopy(dst, src)
	return nil
}

// hostCopy copies src to dst (memmove semantics). Large non-overlapping
// copies are split across the cores.
func (e *Engine) hostCopy(dst, src Slice) {
	d, s := dst.hostBytes(), src.hostBytes()
	parts := runtime.GOMAXPROCS(0)
	if len(d) < e.cfg.ParallelCopyMin || parts < 2 || overlaps(dst, src) {
		copy(d, s)
		return
	}
	per := (len(d)/parts + 4095) &^ 4095
	var wg sync.WaitGroup
	for off := per; off < len(d); off += per {
		end := min(off+per, len(d))
		wg.Add(1)
		dd, ss := d[off:end], s[off:end]
		// Plain goroutines, not pool tasks: a pool task waiting on other
		// pool tasks could starve the pool.
		go func() { defer wg.Done(); copy(dd, ss) }()
	}
	copy(d[:min(per, len(d))], s[:min(per, len(d))])
	wg.Wait()
}

func overlaps(a, b Slice) bool {
	if a.buf != b.buf {
		return false
	}
	return a.off < b.off+b.n && b.off < a.off+a.n
}

func (h *hostPath) closeQueue() { h.q.Close() }

func (h *hostPath) failQueued(err error) {
	buf := make([]*job, 64)
	for {
		n := h.q.PopBatch(buf)
		if n == 0 {
			return
		}
		for _, j := range buf[:n] {
			for i := range j.ops {
				h.e.finishOp(j, &j.ops[i], err)
			}
		}
	}
}
