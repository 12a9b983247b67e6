package engine

import (
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/copier"
	"github.com/gxfer/gxfer/internal/fd"
)

// DMABuf is a reference to the DMA-BUF export of a Gaudi buffer. The engine
// exports each allocation once (through its export cache) and hands the
// same fd to every importer (an RDMA NIC's ibv_reg_dmabuf_mr, another
// process over a unix socket). The fd stays owned by the engine: dup it to
// keep it beyond Release. The habanalabs driver has no mmap for DMA-BUFs, so
// the CPU cannot map it.
type DMABuf struct {
	b        *Buffer
	x        copier.Export
	released atomic.Bool
}

// ExportDMABuf returns the buffer's DMA-BUF export, creating it on first
// use. The buffer stays allocated while references are held (Free is
// deferred until every DMABuf is released). Once the engine's Close has
// begun, it fails with ErrClosed.
func (b *Buffer) ExportDMABuf() (*DMABuf, error) {
	if b == nil {
		return nil, newErr(ErrInvalid, "export of a nil buffer", nil)
	}
	if b.eng == nil {
		return nil, errNoEngine
	}
	if !b.loc.gaudi {
		return nil, newErr(ErrNotSupported, "only Gaudi memory is exported as a DMA-BUF (host memory is shared as a memfd)", nil)
	}
	// Inside the close gate: once Close has begun this fails with
	// ErrClosed (as Export does), not with the freed buffer's error or
	// that of a device Close is closing.
	e := b.eng
	if !e.enter() {
		return nil, ErrClosed
	}
	defer e.exit()
	if err := b.acquire(); err != nil {
		return nil, err
	}
	x, err := copier.ExportOf(&b.m)
	if err != nil {
		b.release()
		return nil, err
	}
	return &DMABuf{b: b, x: x}, nil
}

// FD is the DMA-BUF file descriptor (owned by the engine); nil for a
// DMABuf not made by ExportDMABuf (a nil or declared one).
func (d *DMABuf) FD() *fd.FD {
	if d == nil {
		return nil
	}
	return d.x.FD
}

// Offset is the byte offset of the buffer's first byte in the DMA-BUF:
// the offset an importer passes (ibv_reg_dmabuf_mr's offset). On kernels
// 6.3-6.6 the driver cannot export from an offset, so the DMA-BUF may
// start before the buffer; always use Offset, never assume 0.
func (d *DMABuf) Offset() uint64 {
	if d == nil {
		return 0
	}
	return d.x.Offset
}

// Size is the exported size: the buffer rounded up to whole host pages
// (kernels 6.7+, where a buffer smaller than the device's allocation page
// shares an allocation with others and the export covers it alone), or
// the buffer's own allocation, rounded to the device page, from its start
// (older kernels, where each buffer has an allocation of its own).
func (d *DMABuf) Size() uint64 {
	if d == nil {
		return 0
	}
	return d.x.Size
}

// Release drops the reference. Idempotent; it does nothing for a DMABuf
// not made by ExportDMABuf (a nil or declared one).
func (d *DMABuf) Release() {
	if d == nil || d.b == nil || !d.released.CompareAndSwap(false, true) {
		return
	}
	d.x.Release()
	d.b.release()
}
