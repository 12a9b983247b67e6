// Package dptest is a datapath.Env for tests of data paths without an
// engine: host memory in Go slices, "device" memory too (a Buf marked
// Gaudi), DMAs and copies done by goroutines with host copies, and
// counters that tell whether anything still touches memory.
package dptest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// Buf is a buffer of Env: host memory, or device memory when Gaudi.
type Buf struct {
	id    uint64
	mem   []byte
	gaudi bool
	held  atomic.Int32
	freed atomic.Bool
	st    datapath.BufState
}

var _ datapath.Buf = (*Buf)(nil)

// NewBuf makes a buffer of n bytes (device memory: gaudi).
func (e *Env) NewBuf(n int, gaudi bool) *Buf {
	return &Buf{id: e.ids.Add(1), mem: make([]byte, n), gaudi: gaudi}
}

func (b *Buf) ID() uint64    { return b.id }
func (b *Buf) Len() uint64   { return uint64(len(b.mem)) }
func (b *Buf) IsGaudi() bool { return b.gaudi }

// Addr is a made-up address (the id in the high bits).
func (b *Buf) Addr() uint64 { return b.id << 40 }

// HostBytes is the memory of a host buffer (nil for device memory).
func (b *Buf) HostBytes() []byte {
	if b.gaudi {
		return nil
	}
	return b.mem
}

// Bytes is the memory, whatever its kind (tests).
func (b *Buf) Bytes() []byte { return b.mem }

func (b *Buf) Acquire() error {
	if b.freed.Load() {
		return gxerr.Freed
	}
	b.held.Add(1)
	return nil
}

func (b *Buf) Release() {
	if b.held.Add(-1) < 0 {
		panic("dptest: Release without Acquire")
	}
}

// Held is how many Acquires are not released.
func (b *Buf) Held() int32 { return b.held.Load() }

func (b *Buf) Shared() *ipc.Shared       { return nil }
func (b *Buf) State() *datapath.BufState { return &b.st }
func (b *Buf) ExportDMABuf() (datapath.DMABuf, error) {
	return datapath.DMABuf{}, gxerr.New(gxerr.NotSupported, "dptest: no DMA-BUF", nil)
}

// Env is a datapath.Env over Go memory.
type Env struct {
	Cfg datapath.Config
	// DMAHook, when set, runs on the DMA's goroutine before the copy; an
	// error fails the DMA (the copy is not made).
	DMAHook func(dst, src datapath.Mem) error

	ids      atomic.Uint64
	active   atomic.Int32 // DMAs and copies running
	dmas     atomic.Int32 // started
	allocs   atomic.Int32 // AllocHost not yet freed
	wg       sync.WaitGroup
	slots    chan struct{}
	slotsSet sync.Once
	gate     datapath.Gate
	gateOnce sync.Once
	closed   atomic.Bool // never set: the fake engine does not close
}

var _ datapath.Env = (*Env)(nil)

// Active is how many DMAs and copies are running.
func (e *Env) Active() int32 { return e.active.Load() }

// DMAs is how many DMAs and copies were started.
func (e *Env) DMAs() int32 { return e.dmas.Load() }

// Allocated is how many AllocHost buffers are not freed.
func (e *Env) Allocated() int32 { return e.allocs.Load() }

// Wait waits for every goroutine of Go and every DMA.
func (e *Env) Wait() { e.wg.Wait() }

func (e *Env) Logger() zerolog.Logger  { return zerolog.Nop() }
func (e *Env) Config() datapath.Config { return e.Cfg }

func (e *Env) Lookup(*wire.RemoteKey, uint64, uint64, wire.KeyFlags) (datapath.Mem, wire.Status, string) {
	return datapath.Mem{}, wire.StatusBadKey, "dptest: no keys"
}

// waiter is a DMA's.
type waiter struct {
	done chan struct{}
	err  error
}

func (w *waiter) Done() <-chan struct{} { return w.done }
func (w *waiter) IsDone() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}
func (w *waiter) Err() error {
	if !w.IsDone() {
		return gxerr.NotDone
	}
	return w.err
}
func (w *waiter) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return gxerr.Ctx("dptest: wait", ctx.Err())
	}
}

// DMA copies src to dst on a goroutine (the deadline is ignored).
func (e *Env) DMA(dst, src datapath.Mem, _ time.Time) datapath.Waiter {
	w := &waiter{done: make(chan struct{})}
	if dst.Len != src.Len {
		w.err = gxerr.New(gxerr.Invalid, "dptest: lengths differ", nil)
		close(w.done)
		return w
	}
	e.dmas.Add(1)
	e.active.Add(1)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if e.DMAHook != nil {
			w.err = e.DMAHook(dst, src)
		}
		if w.err == nil {
			copy(dst.B.(*Buf).mem[dst.Off:dst.Off+dst.Len], src.B.(*Buf).mem[src.Off:src.Off+src.Len])
		}
		e.active.Add(-1)
		close(w.done)
	}()
	return w
}

// Copy is DMA, dropped when ctx has ended.
func (e *Env) Copy(ctx context.Context, dst, src datapath.Mem, deadline time.Time) datapath.Waiter {
	if err := ctx.Err(); err != nil {
		w := &waiter{done: make(chan struct{}), err: gxerr.Ctx("dptest: copy dropped", err)}
		close(w.done)
		return w
	}
	return e.DMA(dst, src, deadline)
}

func (e *Env) AllocHost(n uint64) (datapath.Buf, error) {
	e.allocs.Add(1)
	return e.NewBuf(int(n), false), nil
}

func (e *Env) FreeHost(b datapath.Buf) error {
	bb := b.(*Buf)
	if bb.held.Load() != 0 {
		return errors.New("dptest: freed while held")
	}
	if bb.freed.Swap(true) {
		return gxerr.Freed
	}
	e.allocs.Add(-1)
	return nil
}

func (e *Env) WrapHost(mem []byte, onDestroy func() error) (datapath.Buf, error) {
	return &Buf{id: e.ids.Add(1), mem: mem}, nil
}

func (e *Env) Go(fn func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		fn()
	}()
}

func (e *Env) Enter() bool { return e.Gate().Enter() }
func (e *Env) Exit()       { e.Gate().Exit() }

// Gate is the fake engine's close gate (never closed).
func (e *Env) Gate() *datapath.Gate {
	e.gateOnce.Do(func() { e.gate.Init(&e.closed) })
	return &e.gate
}

// SetSlots sets how many transfer slots Slot hands out (default 64).
func (e *Env) SetSlots(n int) {
	e.slotsSet.Do(func() { e.slots = make(chan struct{}, n) })
}

func (e *Env) Slot(ctx context.Context) (func(), error) {
	e.SetSlots(64)
	select {
	case e.slots <- struct{}{}:
		return func() { <-e.slots }, nil
	case <-ctx.Done():
		return nil, gxerr.Ctx("dptest: waiting for a transfer slot", ctx.Err())
	}
}

func (e *Env) CountInline(n, size uint64) {}
