package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/internal/copier"
	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// The engine's side of the data-path contract (internal/datapath): the
// Engine seen as a datapath.Env, a Buffer as a datapath.Buf. Both are
// views of the same objects (a conversion, no allocation), so the
// methods data paths need stay off the public types.

// env is the Engine as its data paths see it.
type env Engine

// dpBuf is a Buffer as data paths see it.
type dpBuf Buffer

var (
	_ datapath.Env = (*env)(nil)
	_ datapath.Buf = (*dpBuf)(nil)
)

func (e *Engine) env() *env { return (*env)(e) }

// buf is b's data-path view.
func (b *Buffer) dp() *dpBuf { return (*dpBuf)(b) }

// mem is s's data-path view.
func (s Slice) mem() datapath.Mem { return datapath.Mem{B: s.buf.dp(), Off: s.off, Len: s.n} }

// fromBuf is the Buffer behind a data-path buffer (the engine makes every
// one).
func fromBuf(b datapath.Buf) *Buffer { return (*Buffer)(b.(*dpBuf)) }

// slice is the Slice a data-path Mem names.
func slice(m datapath.Mem) Slice { return Slice{buf: fromBuf(m.B), off: m.Off, n: m.Len} }

func (b *dpBuf) ID() uint64                { return b.id }
func (b *dpBuf) Len() uint64               { return b.size }
func (b *dpBuf) IsGaudi() bool             { return b.loc.gaudi }
func (b *dpBuf) Addr() uint64              { return (*Buffer)(b).Addr() }
func (b *dpBuf) HostBytes() []byte         { return (*Buffer)(b).hostBytes() }
func (b *dpBuf) Acquire() error            { return (*Buffer)(b).acquire() }
func (b *dpBuf) Release()                  { (*Buffer)(b).release() }
func (b *dpBuf) Shared() *ipc.Shared       { return b.shm }
func (b *dpBuf) State() *datapath.BufState { return &b.dpState }

// ExportDMABuf exports Gaudi memory for RDMA registration: through the
// device's export cache (at the buffer's offset in the DMA-BUF, which
// package dma carries where the kernel ignores an export offset), or, for
// runtime memory, a duplicate of the pool's DMA-BUF (closed by Release).
func (b *dpBuf) ExportDMABuf() (datapath.DMABuf, error) {
	if !b.loc.gaudi {
		return datapath.DMABuf{}, newErr(ErrInvalid, "not device memory", nil)
	}
	if rt := b.m.RT; rt != nil {
		reg, err := rt.MR(&b.m)
		if err != nil {
			return datapath.DMABuf{}, err
		}
		// A duplicate of the pool's DMA-BUF, the data path's until its
		// Release: a Detach that stops waiting for this buffer
		// (CloseGrace) closes the attachment's own fd, whose number the
		// process may then reuse while the registration still uses it.
		f, err := rt.Att.DupDMABuf()
		if err != nil {
			kind := ErrDevice
			if errors.Is(err, dma.ErrDetached) {
				kind = ErrClosed
			}
			return datapath.DMABuf{}, newErr(kind, fmt.Sprintf("buffer %d: duplicate the pool's DMA-BUF", b.id), err)
		}
		return datapath.DMABuf{FD: f.Int(), Offset: reg.Offset, Release: func() { _ = f.Close() }, Registered: func() { rt.MRs.Add(1) }}, nil
	}
	x, err := copier.ExportOf(&b.m)
	if err != nil {
		return datapath.DMABuf{}, newErr(ErrDevice, "export gaudi buffer", err)
	}
	return datapath.DMABuf{FD: x.FD.Int(), Offset: x.Offset, Release: x.Release}, nil
}

func (e *env) eng() *Engine { return (*Engine)(e) }

func (e *env) Logger() zerolog.Logger { return e.log }

func (e *env) Config() datapath.Config {
	return datapath.Config{WaitSpin: e.cfg.WaitSpin, PeerTimeout: e.cfg.PeerTimeout, TCPReadSpin: e.cfg.TCPReadSpin, TCPLanes: e.cfg.TCPLanes, HostCopy: e.eng().hostCopy}
}

func (e *env) Lookup(k *wire.RemoteKey, off, n uint64, need wire.KeyFlags) (datapath.Mem, wire.Status, string) {
	s, st, msg := e.eng().lookupKey(k, off, n, need)
	if st != wire.StatusOK {
		return datapath.Mem{}, st, msg
	}
	return s.mem(), st, msg
}

func (e *env) DMA(dst, src datapath.Mem, deadline time.Time) datapath.Waiter {
	return e.eng().copyInternal(slice(dst), slice(src), deadline)
}

func (e *env) Copy(ctx context.Context, dst, src datapath.Mem, deadline time.Time) datapath.Waiter {
	if deadline.IsZero() {
		return e.eng().Copy(ctx, slice(dst), slice(src))
	}
	return e.eng().Copy(ctx, slice(dst), slice(src), Deadline(deadline))
}

func (e *env) AllocHost(n uint64) (datapath.Buf, error) {
	b, err := e.eng().alloc(int(n), Host, true)
	if err != nil {
		return nil, err
	}
	return b.dp(), nil
}

func (e *env) FreeHost(b datapath.Buf) error { return fromBuf(b).Free() }

func (e *env) WrapHost(mem []byte, onDestroy func() error) (datapath.Buf, error) {
	b := &Buffer{eng: e.eng(), id: e.nextID.Add(1), loc: Host, size: uint64(len(mem)), user: mem, ptr: unsafe.Pointer(&mem[0]), onDestroy: onDestroy, internal: true}
	b.initMem()
	if err := e.cp.AddHost(&b.m); err != nil {
		return nil, err
	}
	e.eng().track(b)
	return b.dp(), nil
}

// Enter admits a copy on the caller's goroutine (and runs the test hook
// inside the gate, before the copy touches memory).
func (e *env) Enter() bool {
	if !e.eng().enter() {
		return false
	}
	e.eng().gateHook()
	return true
}

func (e *env) Exit() { e.eng().exit() }

func (e *env) Gate() *datapath.Gate { return &e.gate }

func (e *env) Slot(ctx context.Context) (func(), error) {
	select {
	case e.rmaSem <- struct{}{}:
		return func() { <-e.rmaSem }, nil
	case <-ctx.Done():
		return nil, ctxErr("waiting for a transfer slot", ctx.Err())
	}
}

// ExportKey is Buffer.Export's key (shm: the bounce buffer a peer
// performs a request into).
func (e *env) ExportKey(b datapath.Buf) (wire.RemoteKey, error) {
	k, err := fromBuf(b).Export()
	return k.k, err
}

func (e *env) CountInline(n, size uint64) { e.st.RecordDone(n, size, true) }
