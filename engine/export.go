package engine

import (
	"fmt"
	"sync/atomic"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/memcache"
)

// DMABuf is a reference to the DMA-BUF export of a Gaudi buffer. The engine
// exports each allocation once (through its export cache) and hands the
// same fd to every importer (an RDMA NIC's ibv_reg_dmabuf_mr, another
// process over a unix socket). The fd stays owned by the engine: dup it to
// keep it beyond Release. The habanalabs driver has no mmap for DMA-BUFs, so
// the CPU cannot map it.
type DMABuf struct {
	b        *Buffer
	r        *memcache.Region
	reg      *attachedExport // runtime memory: the pool's DMA-BUF (attach.go)
	released atomic.Bool
}

// ExportDMABuf returns the buffer's DMA-BUF export, creating it on first
// use. The buffer stays allocated while references are held (Free is
// deferred until every DMABuf is released).
func (b *Buffer) ExportDMABuf() (*DMABuf, error) {
	if !b.loc.gaudi {
		return nil, newErr(ErrNotSupported, "only Gaudi memory is exported as a DMA-BUF (host memory is shared as a memfd)", nil)
	}
	if b.att != nil {
		return b.att.a.exportDMABuf(b)
	}
	if err := b.acquire(); err != nil {
		return nil, err
	}
	r, err := b.gd.Exports.Get(b.dmem.Addr(), b.size, memcache.AccessRead|memcache.AccessWrite)
	if err != nil {
		b.release()
		return nil, fmt.Errorf("gxfer: export gaudi%d buffer %d: %w", b.gd.Idx, b.id, err)
	}
	if _, err := dmabufOffset(b, r.Value().(*dma.DMABuf)); err != nil {
		b.gd.Exports.Put(r)
		b.release()
		return nil, err
	}
	return &DMABuf{b: b, r: r}, nil
}

func (d *DMABuf) export() *dma.DMABuf { return d.r.Value().(*dma.DMABuf) }

// FD is the DMA-BUF file descriptor (owned by the engine).
func (d *DMABuf) FD() *fd.FD {
	if d.reg != nil {
		return d.reg.f
	}
	return d.export().FD()
}

// Offset is the byte offset of the buffer's first byte in the DMA-BUF:
// the offset an importer passes (ibv_reg_dmabuf_mr's offset). On kernels
// 6.3-6.6 the driver cannot export from an offset, so the DMA-BUF may
// start before the buffer; always use Offset, never assume 0.
func (d *DMABuf) Offset() uint64 {
	if d.reg != nil {
		return d.reg.off
	}
	off, _ := dmabufOffset(d.b, d.export()) // the export covers the buffer (checked in ExportDMABuf)
	return off
}

// dmabufOffset is the offset of b's first byte in db, an export of b's
// allocation; an error if db does not cover b.
func dmabufOffset(b *Buffer, db *dma.DMABuf) (uint64, error) {
	off, ok := db.OffsetOf(b.Addr() - db.Mem().Addr())
	if !ok || b.size > db.Size()-off {
		return 0, newErr(ErrDevice, fmt.Sprintf("the DMA-BUF of gaudi%d buffer %d (%d bytes from allocation byte %d) does not cover the buffer",
			b.gd.Idx, b.id, db.Size(), db.MemOffset()), nil)
	}
	return off, nil
}

// Size is the exported size (the allocation, rounded to the device page).
func (d *DMABuf) Size() uint64 {
	if d.reg != nil {
		return d.reg.size
	}
	return d.export().Size()
}

// Release drops the reference. Idempotent.
func (d *DMABuf) Release() {
	if !d.released.CompareAndSwap(false, true) {
		return
	}
	if d.reg != nil {
		d.b.release()
		return
	}
	d.b.gd.Exports.Put(d.r)
	d.b.release()
}
