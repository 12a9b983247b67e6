package copier

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/gxerr"
)

// StageChunk is the bounce-buffer size for copies between two devices.
const StageChunk = 4 << 20

// stage hands a copy between two devices to a staging task: two pinned
// host bounce buffers, the device-to-host DMA of chunk k+1 overlapping the
// host-to-device DMA of chunk k. Tasks are goroutines bounded by a
// semaphore taken inside them, so the worker handing them over never
// blocks.
//
// An op with a deadline ends with ErrTimeout at its deadline, but keeps
// its buffers (and the task its bounce buffers) until the DMAs it started
// have retired: the inner copies' futures resolve only then.
func (c *Copier) stage(j *Job, o *Op) {
	o.handed = true
	var ended atomic.Bool
	done := func(err error) {
		if ended.CompareAndSwap(false, true) {
			c.opDone(j, o, err)
		}
	}
	var timer *time.Timer
	if !j.Deadline.IsZero() {
		timer = time.AfterFunc(time.Until(j.Deadline), func() {
			done(gxerr.New(gxerr.Timeout, "copy between devices: deadline passed", nil))
		})
	}
	c.stages.Add(1)
	go func() {
		defer c.stages.Done()
		var err error
		defer func() {
			if r := recover(); r != nil {
				c.onPanic(r)
				err = gxerr.New(gxerr.Panic, fmt.Sprint(r), nil)
			}
			if timer != nil {
				timer.Stop()
			}
			c.opRelease(j, o)
			done(err)
		}()
		ctx := j.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		select {
		case c.stageSem <- struct{}{}:
		case <-ctx.Done():
			err = gxerr.Ctx("copy between devices not started", ctx.Err())
			return
		}
		defer func() { <-c.stageSem }()
		err = c.stageCopy(ctx, o, j.Deadline)
	}()
}

// stageCopy moves o chunk by chunk. When opCtx ends, no further chunk is
// started: the chunks in flight finish, and the copy ends with ErrCanceled
// or ErrTimeout (the destination holds the chunks done before).
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
