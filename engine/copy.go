package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/gxfer/gxfer/internal/copier"
)

// OpOption adjusts one operation.
type OpOption func(*opConfig)

type opConfig struct{ deadline time.Time }

// Timeout gives the operation a deadline d from now (overrides
// Config.OpTimeout). An operation not complete by then ends with
// ErrTimeout.
func Timeout(d time.Duration) OpOption {
	return func(c *opConfig) { c.deadline = time.Now().Add(d) }
}

// Deadline gives the operation an absolute deadline (overrides
// Config.OpTimeout). The zero time means no deadline, as for a context
// without one: Deadline(time.Time{}) also removes Config.OpTimeout's.
func Deadline(t time.Time) OpOption { return func(c *opConfig) { c.deadline = t } }

func (e *Engine) opConfig(opts []OpOption) opConfig {
	var c opConfig
	if e.cfg.OpTimeout > 0 {
		c.deadline = time.Now().Add(e.cfg.OpTimeout)
	}
	if len(opts) > 0 {
		c = applyOpts(c, opts)
	}
	return c
}

// applyOpts applies options to c; apart from opConfig (and not inlined)
// so that c escapes (the options are indirect calls) only when there are
// options: a copy without options allocates no opConfig.
//
//go:noinline
func applyOpts(c opConfig, opts []OpOption) opConfig {
	p := &c
	for _, o := range opts {
		if o != nil { // a nil option is skipped (Copy holds the buffers by now)
			o(p)
		}
	}
	return *p
}

// validateSlice checks one slice used in a transfer.
func (e *Engine) validateSlice(s Slice) error {
	if s.err != nil {
		return s.err
	}
	if s.buf == nil {
		return newErr(ErrInvalid, "empty slice", nil)
	}
	if s.buf.eng != e {
		return newErr(ErrForeign, fmt.Sprintf("buffer %d", s.buf.id), nil)
	}
	if s.n == 0 {
		return newErr(ErrInvalid, "zero-length transfer", nil)
	}
	if s.buf.loc.gaudi && s.buf.att == nil {
		if _, err := e.device(s.buf.loc); err != nil {
			return err
		}
	}
	return nil
}

// validatePair checks both slices of a copy and their lengths.
func (e *Engine) validatePair(dst, src Slice) error {
	if err := e.validateSlice(dst); err != nil {
		return err
	}
	if err := e.validateSlice(src); err != nil {
		return err
	}
	if dst.n != src.n {
		return newErr(ErrInvalid, fmt.Sprintf("length mismatch: dst %d, src %d", dst.n, src.n), nil)
	}
	return nil
}

// validate checks one copy's arguments (memory gxfer drives).
func (e *Engine) validate(dst, src Slice) error {
	if err := e.validatePair(dst, src); err != nil {
		return err
	}
	if dst.buf.att != nil || src.buf.att != nil {
		return newErr(ErrNotSupported, "runtime memory (attached) is copied with Engine.Copy, not in a batch", nil)
	}
	if dst.buf.loc.gaudi && copier.Overlaps(dst.cs(), src.cs()) {
		return newErr(ErrInvalid, "overlapping ranges of one device buffer", nil)
	}
	return e.cp.CheckSize(dst.cs(), src.cs())
}

// checkCtx refuses a nil ctx (ErrInvalid) and one that has already ended
// (ErrCanceled or ErrTimeout, wrapping ctx's error).
func checkCtx(ctx context.Context) error {
	if ctx == nil {
		return newErr(ErrInvalid, "nil context", nil)
	}
	if err := ctx.Err(); err != nil {
		return ctxErr("not started", err)
	}
	return nil
}

// acquire counts the copy against both buffers (failing on freed ones).
func acquirePair(dst, src Slice) error {
	if err := dst.buf.acquire(); err != nil {
		return err
	}
	if err := src.buf.acquire(); err != nil {
		dst.buf.release()
		return err
	}
	return nil
}

// Copy copies src to dst asynchronously, for every pair of host and Gaudi
// memory. Small host-to-host copies complete in the caller and return an
// already resolved future. Bad arguments resolve the future at once with
// a typed error and submit nothing. ctx bounds the submission (waiting
// for queue room). A copy involving Gaudi memory that is still in its
// device queue when ctx ends is dropped: its future resolves with
// ErrCanceled (or ErrTimeout for an expired deadline), wrapping ctx's
// error, and its memory was never touched. Once in a command submission a
// copy runs to its end, bounded only by its deadline option, if any. A
// host-to-host copy run by a host worker is dropped the same way while it
// is queued, and a large one (over 1 MiB: copied in pieces) stops between
// two pieces once ctx ends or its deadline passes while it runs, with
// ErrCanceled or ErrTimeout, the content of dst then undefined; one run
// in the caller is done on return. src and dst may
// overlap in host memory (the copy is then a memmove); overlapping ranges
// of one Gaudi buffer are refused with ErrInvalid (the DMA engines copy a
// copy's pieces in no set order).
func (e *Engine) Copy(ctx context.Context, dst, src Slice, opts ...OpOption) *Future {
	if e.invalid() {
		return resolved(errNoEngineMade)
	}
	if err := checkCtx(ctx); err != nil {
		return resolved(err)
	}
	if !e.enter() { // Close unmaps nothing while the call is in
		return resolved(ErrClosed)
	}
	defer e.exit()
	if attachedPair(dst, src) {
		f := newFuture(1)
		if err := e.attachedCopy(&f.f, dst, src, e.opConfig(opts).deadline, false); err != nil {
			return resolved(err)
		}
		return f
	}
	if err := e.validate(dst, src); err != nil {
		return resolved(err)
	}
	if err := acquirePair(dst, src); err != nil {
		return resolved(err)
	}
	e.st.Submitted.Add(1)
	// A copy whose deadline (the option's or ctx's) has passed is not run
	// in the caller: the host worker fails it with ErrTimeout, as every
	// path does.
	deadline := e.opConfig(opts).deadline
	if e.cp.CopyInline(ctx, dst.cs(), src.cs(), deadline) {
		return e.resolved
	}
	f := newFuture(1)
	f.setSpin(e.cfg.WaitSpin)
	if err := e.cp.Copy(ctx, &f.f, dst.cs(), src.cs(), deadline); err != nil {
		e.st.Submitted.Add(^uint64(0))
		dst.buf.release()
		src.buf.release()
		return resolved(err)
	}
	return f
}

// CopySync is the synchronous twin of Copy: it returns when the copy is
// done. ctx bounds the wait, but the copy is waited for even when ctx ends
// (the buffers are in use until then); then the copy's error is returned,
// or ErrCanceled/ErrTimeout (wrapping ctx's error) if it succeeded all the
// same.
func (e *Engine) CopySync(ctx context.Context, dst, src Slice, opts ...OpOption) error {
	return waitSync(ctx, e.Copy(ctx, dst, src, opts...))
}

// copyInternal submits a copy on behalf of an operation that already holds
// both buffers (staging): no reference is taken and nothing is counted.
// Its future resolves only when the hardware is done with both slices
// (see copier.Copier.CopyInternal).
func (e *Engine) copyInternal(dst, src Slice, deadline time.Time) *copier.Future {
	if attachedPair(dst, src) {
		f := copier.NewFuture(1)
		if err := e.attachedCopy(f, dst, src, deadline, true); err != nil {
			return copier.Resolved(err)
		}
		return f
	}
	return e.cp.CopyInternal(dst.cs(), src.cs(), deadline)
}

// Batch collects copies to submit as one unit: host-to-host copies run in
// Submit, device copies are coalesced into as few command submissions as
// the limits allow. Copies in a batch are unordered with respect to each
// other: where one's destination overlaps another's source or
// destination, the content is undefined (each copy's own src and dst
// follow Copy's rule). A Batch may be reused after Submit (Reset is implied). A Batch is
// not safe for concurrent use: one goroutine adds to and submits it. A Batch is
// made by Engine.NewBatch: Submit refuses a declared Batch{} (or a nil
// *Batch) with ErrInvalid.
type Batch struct {
	e   *Engine
	ops []batchOp
	cps []copier.Op // the same copies, as the copier takes them
}

type batchOp struct{ dst, src Slice }

// NewBatch returns an empty batch.
func (e *Engine) NewBatch() *Batch {
	if e.invalid() {
		return &Batch{} // refused by Submit
	}
	return &Batch{e: e}
}

// Copy adds a copy and returns its index in the batch's per-op status
// (-1 for a nil batch, which holds nothing).
func (b *Batch) Copy(dst, src Slice) int {
	if b == nil {
		return -1
	}
	b.ops = append(b.ops, batchOp{dst: dst, src: src})
	return len(b.ops) - 1
}

// Len is the number of copies in the batch.
func (b *Batch) Len() int {
	if b == nil {
		return 0
	}
	return len(b.ops)
}

// Reset empties the batch.
func (b *Batch) Reset() {
	if b == nil {
		return
	}
	clear(b.ops)
	b.ops = b.ops[:0]
	clear(b.cps)
	b.cps = b.cps[:0]
}

// Submit validates every copy and submits them all, or none: if any copy is
// invalid the future resolves at once with that error (Errs tells which)
// and nothing is submitted; if the batch is refused as a whole (ctx
// already ended or nil, the engine closed, a queue full) every entry of
// Errs carries the refusal. The future's Errs gives per-copy status. ctx
// bounds the submission; when it ends, the batch's device copies not yet
// in a command submission are dropped, as Copy's are (ErrCanceled or
// ErrTimeout in Errs); its host-to-host copies run in Submit, after the
// device copies are queued: when ctx has ended or the deadline (the
// option's or ctx's) has passed by then, they copy nothing (ErrCanceled or
// ErrTimeout in Errs), and a large one (over 1 MiB: copied in pieces)
// stops between two pieces once ctx ends or the deadline option passes
// while it runs, as Copy's run by a host worker does (ErrCanceled or
// ErrTimeout in Errs, the content of its dst then undefined).
func (b *Batch) Submit(ctx context.Context, opts ...OpOption) *Future {
	defer b.Reset()
	if b == nil || b.e == nil {
		return resolved(newErr(ErrInvalid, "batch not made by Engine.NewBatch", nil))
	}
	e := b.e
	n := len(b.ops)
	if err := checkCtx(ctx); err != nil {
		return batchRefused(n, err)
	}
	if !e.enter() { // Close unmaps nothing while the call is in
		return batchRefused(n, ErrClosed)
	}
	defer e.exit()
	if n == 0 {
		return e.resolved
	}
	f := newBatchFuture(n)
	f.setSpin(e.cfg.WaitSpin)
	for i := range b.ops {
		if err := e.validate(b.ops[i].dst, b.ops[i].src); err != nil {
			return batchInvalid(n, i, err)
		}
	}
	if i, err := acquireOps(b.ops); err != nil {
		return batchInvalid(n, i, err)
	}
	b.cps = b.cps[:0]
	for i := range b.ops {
		b.cps = append(b.cps, copier.Op{Dst: b.ops[i].dst.cs(), Src: b.ops[i].src.cs(), Idx: i})
	}
	// A batch is never submitted half-way (see copier.SubmitBatch).
	if err := e.cp.SubmitBatch(ctx, &f.f, b.cps, e.opConfig(opts).deadline); err != nil {
		releaseRuns(b.ops, (*batchOp).dstBuf)
		releaseRuns(b.ops, (*batchOp).srcBuf)
		return batchRefused(n, err)
	}
	return f
}

// acquireOps counts each copy of ops against its two buffers, as
// acquirePair does, with one atomic update per run of consecutive copies
// on one buffer (a batch mostly repeats its buffers: 512 updates of two
// shared counters became two for a 256-copy batch). On a freed buffer it
// holds nothing and returns the index of the first copy of the run that
// failed.
func acquireOps(ops []batchOp) (int, error) {
	if i, err := acquireRuns(ops, (*batchOp).dstBuf); err != nil {
		return i, err
	}
	if i, err := acquireRuns(ops, (*batchOp).srcBuf); err != nil {
		releaseRuns(ops, (*batchOp).dstBuf)
		return i, err
	}
	return 0, nil
}

func (o *batchOp) dstBuf() *Buffer { return o.dst.buf }
func (o *batchOp) srcBuf() *Buffer { return o.src.buf }

// eachRun calls f with the buffer and the length of each run of
// consecutive ops whose buf is that buffer, until f fails, and returns
// f's error with the failed run's first index.
func eachRun(ops []batchOp, buf func(*batchOp) *Buffer, f func(b *Buffer, n uint64) error) (int, error) {
	for start := 0; start < len(ops); {
		b, end := buf(&ops[start]), start+1
		for end < len(ops) && buf(&ops[end]) == b {
			end++
		}
		if err := f(b, uint64(end-start)); err != nil {
			return start, err
		}
		start = end
	}
	return 0, nil
}

// acquireRuns acquires buf(op) for every op, a run at a time; on a freed
// buffer it releases what it took and returns the failed run's first op.
func acquireRuns(ops []batchOp, buf func(*batchOp) *Buffer) (int, error) {
	i, err := eachRun(ops, buf, (*Buffer).acquireN)
	if err != nil {
		releaseRuns(ops[:i], buf)
	}
	return i, err
}

// releaseRuns releases what acquireRuns took for ops.
func releaseRuns(ops []batchOp, buf func(*batchOp) *Buffer) {
	_, _ = eachRun(ops, buf, func(b *Buffer, n uint64) error { b.releaseN(n); return nil })
}

// batchRefused is the future of a batch whose submission as a whole
// failed (its ctx ended or nil, a queue full, the engine closing): every
// copy carries err, none is blamed for it. An empty batch's is a plain
// future with err.
func batchRefused(n int, err error) *Future {
	if n == 0 {
		return resolved(err)
	}
	f := newBatchFuture(n)
	err = fmt.Errorf("gxfer: batch not submitted: %w", err)
	for i := range n {
		f.complete(i, err)
	}
	return f
}

// batchInvalid is the future of a batch that was not submitted because of
// op idx.
func batchInvalid(n, idx int, err error) *Future {
	f := newBatchFuture(n)
	f.complete(idx, err)
	f.completeAll(fmt.Errorf("gxfer: batch not submitted: copy %d failed: %w", idx, err))
	return f
}
