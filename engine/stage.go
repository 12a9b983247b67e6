package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// stageChunk is the bounce-buffer size for copies between two devices.
const stageChunk = 4 << 20

// stage hands a copy between two devices to a staging task: two pinned
// host bounce buffers, the device-to-host DMA of chunk k+1 overlapping the
// host-to-device DMA of chunk k. Tasks are goroutines bounded by a
// semaphore taken inside them, so the worker handing them over never
// blocks.
//
// An op with a deadline ends with ErrTimeout at its deadline, but keeps
// its buffers (and the task its bounce buffers) until the DMAs it started
// have retired: the inner copies' futures resolve only then.
func (e *Engine) stage(j *job, o *op) {
	o.handed = true
	var ended atomic.Bool
	done := func(err error) {
		if ended.CompareAndSwap(false, true) {
			e.opDone(j, o, err)
		}
	}
	var timer *time.Timer
	if !j.deadline.IsZero() {
		timer = time.AfterFunc(time.Until(j.deadline), func() {
			done(newErr(ErrTimeout, "copy between devices: deadline passed", nil))
		})
	}
	e.async.Add(1)
	go func() {
		defer e.async.Done()
		var err error
		defer func() {
			if r := recover(); r != nil {
				e.onPanic(r)
				err = newErr(ErrPanic, fmt.Sprint(r), nil)
			}
			if timer != nil {
				timer.Stop()
			}
			e.opRelease(j, o)
			done(err)
		}()
		ctx := j.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		select {
		case e.stageSem <- struct{}{}:
		case <-ctx.Done():
			err = ctxErr("copy between devices not started", ctx.Err())
			return
		}
		defer func() { <-e.stageSem }()
		err = e.stageCopy(ctx, o, j.deadline)
	}()
}

// stageCopy moves o chunk by chunk. When opCtx ends, no further chunk is
// started: the chunks in flight finish, and the copy ends with ErrCanceled
// or ErrTimeout (the destination holds the chunks done before).
func (e *Engine) stageCopy(opCtx context.Context, o *op, deadline time.Time) (err error) {
	n := o.n()
	bsz := min(n, stageChunk)
	var bounce [2]*Buffer
	for i := range bounce {
		if bounce[i], err = e.Alloc(int(bsz), Host); err != nil {
			for _, b := range bounce[:i] {
				_ = b.Free()
			}
			return err
		}
	}
	defer func() {
		for _, b := range bounce {
			_ = b.Free()
		}
	}()
	ctx := context.Background()
	var pend [2]*Future
	var errs []error
	k := 0
	for off := uint64(0); off < n && len(errs) == 0; off += bsz {
		m := int(min(bsz, n-off))
		if err := opCtx.Err(); err != nil {
			errs = append(errs, ctxErr("copy between devices stopped", err))
			break
		}
		if pend[k] != nil {
			if err := pend[k].Wait(ctx); err != nil {
				errs = append(errs, err)
				break
			}
		}
		down := e.copyInternal(bounce[k].Slice(0, m), o.src.buf.Slice(int(o.src.off+off), m), deadline)
		if err := down.Wait(ctx); err != nil {
			errs = append(errs, err)
			break
		}
		pend[k] = e.copyInternal(o.dst.buf.Slice(int(o.dst.off+off), m), bounce[k].Slice(0, m), deadline)
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
