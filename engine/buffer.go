package engine

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/internal/copier"
	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/ipc"
)

// Location says where a buffer lives: Host or Gaudi(i).
type Location struct {
	gaudi    bool
	dev      int
	attached bool // runtime memory of Attachment dev (attach.go)
}

// Host is host memory.
var Host = Location{}

// Gaudi is the memory (HBM) of Gaudi device i.
func Gaudi(i int) Location { return Location{gaudi: true, dev: i} }

// IsGaudi reports whether l is device memory.
func (l Location) IsGaudi() bool { return l.gaudi }

// Device is the device index of Gaudi memory (-1 for host memory).
func (l Location) Device() int {
	if !l.gaudi {
		return -1
	}
	return l.dev
}

// String names the location: "host", "gaudiN" or "attachedN".
func (l Location) String() string {
	if l.attached {
		return fmt.Sprintf("attached%d", l.dev)
	}
	if l.gaudi {
		return fmt.Sprintf("gaudi%d", l.dev)
	}
	return "host"
}

const freedBit = copier.FreedBit

// errNoEngine refuses a Buffer not made by an Engine (a declared
// Buffer{}): it has no memory and no engine to ask about it.
var errNoEngine = newErr(ErrInvalid, "buffer not made by Engine.Alloc or Register", nil)

// Buffer is a range of memory the engine can move data to and from: host
// memory it allocated (page aligned, outside the Go heap), caller memory it
// registered, or Gaudi device memory. A Buffer is safe for concurrent use.
type Buffer struct {
	eng  *Engine
	id   uint64
	loc  Location
	size uint64

	// host memory
	ptr   unsafe.Pointer // base address
	pages []byte         // engine-allocated memory, size bytes (nil for registered memory)
	user  []byte         // caller's registered memory, kept reachable
	shm   *ipc.Shared    // engine-allocated host memory: a sealed memfd
	// onDestroy releases what backs internal buffers (imported mappings).
	onDestroy func() error
	// internal: the engine's own buffer (a data path's: imported
	// mapping, bounce buffer), which Lookup does not hand out.
	internal bool
	exported atomic.Bool

	// device memory
	gd   *copier.Device
	dmem *dma.DeviceMem

	att *attachedMem // runtime memory of an Attachment (attach.go)

	// dpState is what data paths keep per buffer (datapath.BufState).
	dpState datapath.BufState

	// state counts operations in flight; freedBit marks a freed buffer.
	state    atomic.Uint64
	released atomic.Bool

	m copier.Mem // what copies read of the buffer (initMem)
}

// initMem fills b.m once b's memory is set.
func (b *Buffer) initMem() {
	b.m = copier.Mem{Gaudi: b.loc.gaudi, Device: b.gd, DMem: b.dmem, Addr: b.Addr(), Ptr: b.ptr, Size: b.size, ID: b.id, Refs: &b.state, Owner: b}
	if b.att != nil {
		b.m.RT = b.att.a.rt
	}
}

// cs is s as the copier sees it.
func (s Slice) cs() copier.Slice { return copier.Slice{M: &s.buf.m, Off: s.off, N: s.n} }

// Location returns where the buffer lives (Host for a nil buffer).
func (b *Buffer) Location() Location {
	if b == nil {
		return Location{}
	}
	return b.loc
}

// Size returns the buffer's size in bytes (0 for a nil buffer).
func (b *Buffer) Size() int {
	if b == nil {
		return 0
	}
	return int(b.size)
}

// Addr returns the buffer's address: a host virtual address, or the device
// address (device VA on Gaudi2, physical on Gaudi1) for Gaudi memory.
func (b *Buffer) Addr() uint64 {
	if b == nil {
		return 0
	}
	if b.att != nil {
		return b.att.va
	}
	if b.loc.gaudi {
		return b.dmem.Addr()
	}
	return uint64(uintptr(b.ptr))
}

// Bytes returns host memory as a slice (nil for Gaudi memory, which the
// CPU cannot access). The slice is valid until Free; once the buffer is
// freed (Free, Deregister, the engine's Close), Bytes is nil.
func (b *Buffer) Bytes() []byte {
	if b == nil || b.state.Load()&freedBit != 0 {
		return nil
	}
	return b.hostBytes()
}

// hostBytes is host memory as a slice (nil for Gaudi memory), also once
// the buffer is freed: for the data paths, whose operations in flight
// (and bindings) hold a freed buffer's memory until they end.
func (b *Buffer) hostBytes() []byte {
	if b.loc.gaudi {
		return nil
	}
	if b.user != nil {
		return b.user
	}
	return b.pages
}

// Slice returns the n bytes at offset off. An invalid range yields a Slice
// whose use fails with ErrInvalid.
func (b *Buffer) Slice(off, n int) Slice {
	// A valid range returns its Slice as one composite literal: the
	// compiler then writes the result once, where building it in a
	// variable first made it copy the struct with loads that straddle the
	// stores just made (a store-forwarding stall: about a quarter of the
	// time that building a 256-copy batch took, by pprof -disasm).
	if b != nil && off >= 0 && n >= 0 && uint64(off) <= b.size && uint64(n) <= b.size-uint64(off) {
		return Slice{buf: b, off: uint64(off), n: uint64(n)}
	}
	return b.badSlice(off, n)
}

// badSlice is Slice of an invalid range: its use fails with the reason.
func (b *Buffer) badSlice(off, n int) Slice {
	s := Slice{buf: b, off: uint64(off), n: uint64(n)}
	switch {
	case b == nil:
		s.err = newErr(ErrInvalid, "nil buffer", nil)
	case off < 0 || n < 0:
		s.err = newErr(ErrInvalid, fmt.Sprintf("negative offset or length (%d, %d)", off, n), nil)
	case uint64(off) > b.size || uint64(n) > b.size-uint64(off):
		s.err = newErr(ErrInvalid, fmt.Sprintf("range [%d, %d) outside buffer of %d bytes", off, off+n, b.size), nil)
	}
	return s
}

// All returns the whole buffer as a Slice (of a nil buffer: an invalid
// Slice, as Slice's).
func (b *Buffer) All() Slice {
	if b == nil {
		return b.Slice(0, 0)
	}
	return b.Slice(0, int(b.Size()))
}

// acquire counts an operation in flight; it fails once the buffer is freed.
func (b *Buffer) acquire() error { return b.acquireN(1) }

// acquireN counts n operations in flight at once (none if it fails).
func (b *Buffer) acquireN(n uint64) error {
	for {
		s := b.state.Load()
		if s&freedBit != 0 {
			return newErr(ErrFreed, fmt.Sprintf("buffer %d (%s)", b.id, b.loc), nil)
		}
		if b.state.CompareAndSwap(s, s+n) {
			return nil
		}
	}
}

// release ends an operation; the last one out of a freed buffer frees it.
func (b *Buffer) release() { b.releaseN(1) }

// releaseN ends n operations counted by acquire or acquireN.
func (b *Buffer) releaseN(n uint64) {
	if b.state.Add(-n) == freedBit {
		b.destroy()
	}
}

// Free releases the buffer. Operations in flight keep the memory alive
// until they complete; new operations fail with ErrFreed. A Binding
// whose local slice is in the buffer, and a DMABuf of it, hold it: the
// memory is released when the last of them is closed (Binding.Close,
// DMABuf.Release), and until then the binding's Put and Get still use
// it. Idempotent. Free of a nil buffer, or of one not made by an Engine
// (a declared Buffer{}), is ErrInvalid.
func (b *Buffer) Free() error {
	if b == nil {
		return newErr(ErrInvalid, "Free of a nil buffer", nil)
	}
	if b.eng == nil {
		return errNoEngine
	}
	for {
		s := b.state.Load()
		if s&freedBit != 0 {
			return nil
		}
		if b.state.CompareAndSwap(s, s|freedBit) {
			b.eng.hooksRevoke(b)
			if s == 0 {
				return b.destroy()
			}
			return nil
		}
	}
}

// Deregister is Free for registered caller memory: the engine no longer
// touches the memory once Deregister has returned, the operations in
// flight have completed and every Binding whose local slice is in it has
// been closed. Deregistering memory a binding is bound to is deferred,
// by design, until the binding's Close: until then its Put and Get still
// read and write the memory (a binding checks and holds its buffers
// once, at Bind), while new operations on the buffer fail with ErrFreed.
func (b *Buffer) Deregister() error { return b.Free() }

// destroy releases the buffer's memory, once (later calls return nil at
// once). It is counted before released is set, so that Close, whose own
// destroy of a buffer found released set or who no longer found the
// buffer in its books, waits for the release under way (waitDestroys).
func (b *Buffer) destroy() error {
	e := b.eng
	e.destroyMu.Lock()
	e.destroys++
	e.destroyMu.Unlock()
	defer e.destroyDone()
	if !b.released.CompareAndSwap(false, true) {
		return nil
	}
	return e.destroyBuffer(b)
}

// destroyDone ends a destroy's count.
func (e *Engine) destroyDone() {
	e.destroyMu.Lock()
	if e.destroys--; e.destroys == 0 {
		e.destroyIdle.Broadcast()
	}
	e.destroyMu.Unlock()
}

// waitDestroys waits (Close, after it released the live buffers) until
// no buffer release is under way; the test hook runs when it waits.
func (e *Engine) waitDestroys() {
	e.destroyMu.Lock()
	defer e.destroyMu.Unlock()
	if e.destroys > 0 {
		e.destroyMu.Unlock()
		e.onDrain()
		e.destroyMu.Lock()
	}
	for e.destroys > 0 {
		e.destroyIdle.Wait()
	}
}

// Slice is a byte range of a Buffer, the unit of every transfer.
type Slice struct {
	buf *Buffer
	off uint64
	n   uint64
	err error
}

// Buffer returns the slice's buffer.
func (s Slice) Buffer() *Buffer { return s.buf }

// Offset returns the slice's offset in its buffer.
func (s Slice) Offset() int { return int(s.off) }

// Len returns the slice's length.
func (s Slice) Len() int { return int(s.n) }

// Err reports a range error made when the slice was built.
func (s Slice) Err() error { return s.err }
