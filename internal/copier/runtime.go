package copier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// DeviceCopier is engine.DeviceCopier: the runtime's own copy calls.
type DeviceCopier interface {
	CopyHostToDevice(ctx context.Context, dst uint64, src []byte) error
	CopyDeviceToHost(ctx context.Context, dst []byte, src uint64) error
	CopyDeviceToDevice(ctx context.Context, dst, src, n uint64) error
}

// Runtime is a device the Habana runtime lends (engine.Attachment): its
// pool, the buffers registered over it, and the application's copier,
// which makes every copy of that memory (gxfer submits nothing there).
type Runtime struct {
	Idx    int
	Att    *dma.Attached
	Copier DeviceCopier // nil: copies fail with ErrNoCopier
	// Copies and CopyBytes count the copier's calls, MRs the DMA-BUF
	// memory regions registered over the pool.
	Copies, CopyBytes, MRs atomic.Uint64

	// stopCtx is canceled by StopCopies (Detach, after CloseGrace): the
	// copies in the copier are told to stop, as Engine.Close tells them.
	stopCtx context.Context
	stop    context.CancelFunc

	mu       sync.Mutex
	bufs     map[*Mem]struct{}
	detached bool
	copying  int        // copier calls under way (CopyRuntime)
	idle     *sync.Cond // on mu: copying dropped to 0
}

// NewRuntime is the runtime device att, attachment idx.
func NewRuntime(idx int, att *dma.Attached, cp DeviceCopier) *Runtime {
	r := &Runtime{Idx: idx, Att: att, Copier: cp, bufs: map[*Mem]struct{}{}}
	r.stopCtx, r.stop = context.WithCancel(context.Background())
	r.idle = sync.NewCond(&r.mu)
	return r
}

// StopCopies cancels the context of every copy in the copier, now and
// later, and waits for those under way to return; it reports how many
// there were. Detach calls it once CloseGrace has passed, so that nothing
// of gxfer's still runs on the runtime's memory once Detach returns.
func (r *Runtime) StopCopies() int {
	r.stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.copying
	for r.copying > 0 {
		r.idle.Wait()
	}
	return n
}

func (r *Runtime) beginCopy() {
	r.mu.Lock()
	r.copying++
	r.mu.Unlock()
}

func (r *Runtime) endCopy() {
	r.mu.Lock()
	if r.copying--; r.copying == 0 {
		r.idle.Broadcast()
	}
	r.mu.Unlock()
}

// Add records a buffer registered over the pool; false once detached.
func (r *Runtime) Add(m *Mem) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.detached {
		return false
	}
	r.bufs[m] = struct{}{}
	return true
}

// Forget drops a destroyed buffer.
func (r *Runtime) Forget(m *Mem) {
	r.mu.Lock()
	delete(r.bufs, m)
	r.mu.Unlock()
}

// Len is the number of buffers not yet destroyed.
func (r *Runtime) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bufs)
}

// Detached reports whether Detach was called.
func (r *Runtime) Detached() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.detached
}

// Detach marks the runtime detached and returns its buffers (to free);
// false if it already was.
func (r *Runtime) Detach() ([]*Mem, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.detached {
		return nil, false
	}
	r.detached = true
	out := make([]*Mem, 0, len(r.bufs))
	for m := range r.bufs {
		out = append(out, m)
	}
	return out, true
}

// WaitEmpty waits up to grace for every buffer to be destroyed and
// returns how many are left.
func (r *Runtime) WaitEmpty(grace time.Duration) int {
	deadline := time.Now().Add(grace)
	for {
		left := r.Len()
		if left == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(time.Millisecond)
	}
}

// name is where m lives, for messages: "attachedN", "gaudiN" or "host".
func (m *Mem) name() string {
	switch {
	case m.RT != nil:
		return fmt.Sprintf("attached%d", m.RT.Idx)
	case m.Gaudi:
		return fmt.Sprintf("gaudi%d", m.Device.Idx)
	}
	return "host"
}

// CheckRuntime checks a copy involving runtime memory (slices of one
// length, validated by the engine) and returns its runtime.
func CheckRuntime(dst, src Slice) (*Runtime, error) {
	var r *Runtime
	for _, s := range []Slice{dst, src} {
		switch {
		case s.M.RT != nil && r != nil && s.M.RT != r:
			return nil, gxerr.New(gxerr.NotSupported, "copy between two attachments", nil)
		case s.M.RT != nil:
			r = s.M.RT
		case s.M.Gaudi:
			return nil, gxerr.New(gxerr.NotSupported, "copy between runtime memory and a device gxfer owns", nil)
		}
	}
	if r.Copier == nil {
		return nil, gxerr.New(gxerr.NotSupported, fmt.Sprintf("%s: %v (give AttachConfig.Copier, e.g. the runtime's synMemCopyAsync)", dst.M.name(), gxerr.NoCopier), gxerr.NoCopier)
	}
	if dst.M.RT != nil && src.M.RT != nil && Overlaps(dst, src) {
		return nil, gxerr.New(gxerr.Invalid, "overlapping ranges of runtime memory", nil)
	}
	return r, nil
}

// CopyRuntime runs a copy checked by CheckRuntime through the runtime's
// copier, on a goroutine (WaitRuntime waits for it), completing f
// (initialized for one operation). internal: a staging copy for an
// operation that holds the buffers; else the copy holds a reference to
// each buffer, dropped when it ends.
func (c *Copier) CopyRuntime(r *Runtime, f *Future, dst, src Slice, deadline time.Time, internal bool) {
	start := c.clock()
	c.runtime.Add(1)
	r.beginCopy()
	go func() {
		defer c.runtime.Done()
		defer r.endCopy()
		// The copy's context derives from c.rtCtx, which Close cancels
		// after CloseGrace, and ends with r.stopCtx, which Detach cancels
		// after CloseGrace.
		var (
			cctx   context.Context
			cancel context.CancelFunc
		)
		if deadline.IsZero() {
			cctx, cancel = context.WithCancel(c.rtCtx)
		} else {
			cctx, cancel = context.WithDeadline(c.rtCtx, deadline)
		}
		unhook := context.AfterFunc(r.stopCtx, cancel)
		err := r.copy(cctx, dst, src)
		unhook()
		cancel()
		switch {
		case err == nil, errors.Is(err, gxerr.NotSupported):
		case c.rtCtx.Err() != nil:
			err = gxerr.New(gxerr.Closed, "the engine closed while the device copier ran (after CloseGrace)", err)
		case r.stopCtx.Err() != nil:
			err = gxerr.New(gxerr.Closed, "the attachment was detached while the device copier ran (after CloseGrace)", err)
		case errors.Is(err, context.DeadlineExceeded):
			err = gxerr.New(gxerr.Timeout, "the device copier did not finish by the deadline", err)
		default:
			err = gxerr.New(gxerr.Device, "device copier", err)
		}
		if !internal {
			c.release(dst.M)
			c.release(src.M)
			c.st.Record(c.clock()-start, src.N, err)
		}
		f.Complete(0, err)
	}()
}

// WaitRuntime waits for the copies handed to runtimes' copiers: up to
// CloseGrace, then it cancels their context and waits for them to return.
func (c *Copier) WaitRuntime() {
	if c == nil {
		return
	}
	done := make(chan struct{})
	go func() { c.runtime.Wait(); close(done) }()
	t := time.NewTimer(c.cfg.CloseGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.rtCancel()
		<-done
	}
	c.rtCancel()
}

// copy makes one copy with the copier.
func (r *Runtime) copy(ctx context.Context, dst, src Slice) error {
	va := func(s Slice) uint64 { return s.M.Addr + s.Off }
	var err error
	switch {
	case dst.M.RT != nil && src.M.RT != nil:
		err = r.Copier.CopyDeviceToDevice(ctx, va(dst), va(src), src.N)
	case dst.M.RT != nil:
		err = r.Copier.CopyHostToDevice(ctx, va(dst), src.HostBytes())
	default:
		err = r.Copier.CopyDeviceToHost(ctx, dst.HostBytes(), va(src))
	}
	if err == nil {
		r.Copies.Add(1)
		r.CopyBytes.Add(src.N)
	}
	return err
}
