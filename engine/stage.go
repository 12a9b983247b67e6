package engine

import (
	"context"
	"errors"
)

// stageChunk is the bounce-buffer size for copies between two devices.
const stageChunk = 4 << 20

// crossDeviceCopy copies between two Gaudi devices through two pinned host
// bounce buffers: the device-to-host DMA of chunk k+1 overlaps the
// host-to-device DMA of chunk k. It runs as a worker task.
func (e *Engine) crossDeviceCopy(j *job) error {
	return e.stage.Submit(func() {
		o := &j.ops[0]
		e.finishOp(j, o, e.stageCopy(o))
	})
}

func (e *Engine) stageCopy(o *op) (err error) {
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
		if pend[k] != nil {
			if err := pend[k].Wait(ctx); err != nil {
				errs = append(errs, err)
				break
			}
		}
		down := e.Copy(ctx, bounce[k].Slice(0, m), o.src.buf.Slice(int(o.src.off+off), m))
		if err := down.Wait(ctx); err != nil {
			errs = append(errs, err)
			break
		}
		pend[k] = e.Copy(ctx, o.dst.buf.Slice(int(o.dst.off+off), m), bounce[k].Slice(0, m))
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
