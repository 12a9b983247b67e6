package dma

import (
	"fmt"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// DMABuf is a DMA-BUF export of a device memory range: a file descriptor
// that another device driver (an RDMA NIC through ibv_reg_dmabuf_mr) or
// another process can import. The habanalabs exporter has no mmap op, so
// the CPU cannot map it; never mmap it.
//
// The DMA-BUF may cover more than the range asked for (page rounding, and
// on kernels 6.3-6.6 the start of the allocation; see ExportDMABuf). The
// wanted range is always [Offset(), Offset()+Len()) of the DMA-BUF: that
// is the offset and length to give an importer (ibv_reg_dmabuf_mr's offset
// and length). MemOffset and Size say exactly which bytes of the
// allocation the DMA-BUF exposes.
//
// While a DMABuf is open its DeviceMem cannot be freed, and the device
// context lives on in the kernel until every copy of the fd is closed.
type DMABuf struct {
	d      *Device
	id     uint64
	f      *fd.FD
	mem    *DeviceMem
	memOff uint64 // the DMA-BUF's byte 0 is mem byte memOff
	offset uint64 // the wanted range starts at DMA-BUF byte offset
	length uint64 // the wanted range's length
	size   uint64 // the DMA-BUF's size

	done bool // guarded by d.mu
}

// FD returns the owned descriptor. Do not Disown or Close it; use
// DMABuf.Close. To hand it to another process, Dup it or send its Int()
// over SCM_RIGHTS while the DMABuf is open.
func (b *DMABuf) FD() *fd.FD { return b.f }

// Offset is where the wanted range starts inside the DMA-BUF: the offset
// an importer must use (ibv_reg_dmabuf_mr's offset; an IPC peer's file
// offset). It is not 0 when the kernel's own offset could not be used.
func (b *DMABuf) Offset() uint64 { return b.offset }

// Len is the length of the wanted range (the size passed to ExportDMABuf).
func (b *DMABuf) Len() uint64 { return b.length }

// Size is the size of the DMA-BUF itself (a multiple of the host page size,
// or the whole allocation with the 6.1 API). Offset()+Len() <= Size().
func (b *DMABuf) Size() uint64 { return b.size }

// MemOffset is the offset in Mem() of the DMA-BUF's first byte: the
// DMA-BUF exposes [MemOffset, MemOffset+Size) of the allocation.
func (b *DMABuf) MemOffset() uint64 { return b.memOff }

// OffsetOf returns the DMA-BUF offset of byte memOff of the allocation,
// and false if that byte is not in the DMA-BUF. Importers of a part of the
// allocation (an MR over one buffer) must use it rather than assume the
// DMA-BUF starts where they asked.
func (b *DMABuf) OffsetOf(memOff uint64) (uint64, bool) {
	if memOff < b.memOff || memOff-b.memOff >= b.size {
		return 0, false
	}
	return memOff - b.memOff, true
}

// Mem is the exported device memory.
func (b *DMABuf) Mem() *DeviceMem { return b.mem }

// ExportOffsetHonored reports whether the kernel applies EXPORT_DMABUF_FD's
// offset when it builds the DMA-BUF (Gaudi2/3). Only the {addr, size,
// offset} form has an offset, and drivers before "accel/habanalabs: add
// missing offset handling for dma-buf" (kernel 6.7) validate it but build
// the scatter list from the start of the allocation, so an importer would
// see the wrong bytes. gxfer cannot read the driver's version; it uses the
// ioctl numbering, which changed in the same release: DRM accel numbers
// (6.7 and later) mean the offset is honoured, legacy numbers with the
// {addr, size, offset} form (6.3-6.6) mean it is not. The 6.1 form has no
// offset at all. When this is false, ExportDMABuf exports from the start
// of the allocation and carries the offset in DMABuf.Offset instead.
func (d *Device) ExportOffsetHonored() bool { return exportOffsetHonored(d.exportAPI, d.b.Numbering()) }

// exportOffsetHonored is the rule behind Device.ExportOffsetHonored, for a
// given export API (chooseExportAPI) and ioctl numbering.
func exportOffsetHonored(api string, n hlsys.Numbering) bool {
	return api == ExportAPIAddr && n == hlsys.Accel
}

// ExportDMABuf exports the range [offset, offset+size) of m as a DMA-BUF,
// with the API picked at open (ExportAPI). The driver takes only page
// aligned addresses and offsets, and (since "accel/habanalabs: export
// dma-buf only if size/offset multiples of PAGE_SIZE", also backported to
// stable kernels) a size that is a multiple of the page size: the exported
// range is the wanted one widened to host page boundaries, which is what
// an importer maps anyway (the driver's own reason for the rule). The
// widened range must stay inside the allocation (AllocSize), else the
// error wraps ErrInvalid. Any offset and size inside the allocation work;
// the DMABuf reports where the wanted range is (Offset, Len):
//
//   - Gaudi1 (no device MMU) passes the physical address of the first
//     page, with offset 0, in either API.
//   - Gaudi2/3, "addr+offset" API, ExportOffsetHonored (kernels 6.7+):
//     addr = m.Addr() (exactly the VA MAP returned) and the page-aligned
//     part of offset; Offset() is the remainder inside the first page.
//   - Gaudi2/3, "addr+offset" API on 6.3-6.6: those drivers ignore the
//     offset when they build the scatter list, so the export always starts
//     at the allocation (kernel offset 0); Offset() = offset. It covers
//     the whole allocation (its page-aligned part, at least up to the end
//     of the wanted range): those drivers also map every importer of any
//     DMA-BUF of the allocation up to the size of its latest export, so
//     exports of one allocation must all have one size.
//   - Gaudi2/3, "6.1 handle" API: the whole allocation is exported by its
//     handle (the driver ignores the size); Offset() = offset.
//
// The file flags are always O_RDWR|O_CLOEXEC.
func (d *Device) ExportDMABuf(m *DeviceMem, offset, size uint64) (*DMABuf, error) {
	op := fmt.Sprintf("export DMA-BUF of [%#x+%d, %d bytes) on %s", addrOf(m), offset, size, d.Name())
	if m == nil || m.d != d {
		return nil, newErr(op, ErrInvalid, "memory does not belong to this device", nil)
	}
	d.mu.Lock()
	freed := m.freed
	d.mu.Unlock()
	if freed {
		return nil, d.freedErr(op)
	}
	if size == 0 {
		return nil, newErr(op, ErrInvalid, "size 0", nil)
	}
	if offset > m.allocSize || size > m.allocSize-offset {
		return nil, newErr(op, ErrInvalid, fmt.Sprintf("range outside the allocation of %d bytes", m.allocSize), nil)
	}
	pl, err := d.planExport(m, offset, size)
	if err != nil {
		return nil, newErr(op, ErrInvalid, err.Error(), nil)
	}

	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.leave()
	d.mu.Lock()
	if m.freed {
		d.mu.Unlock()
		return nil, d.freedErr(op)
	}
	m.exports++ // blocks Free while the export is being made
	d.mu.Unlock()

	var f *fd.FD
	switch {
	case !d.model.hasDeviceMMU() && d.exportAPI == ExportAPIAddr:
		f, err = hlsys.MemExportDMABuf(d.b, m.addr+pl.memOff, pl.size, 0)
	case !d.model.hasDeviceMMU():
		f, err = hlsys.MemExportDMABuf61(d.b, m.addr+pl.memOff, pl.size)
	case m.slab != nil: // only where the offset is honoured (subAllocates)
		f, err = hlsys.MemExportDMABuf(d.b, m.slab.va, pl.size, m.addr-m.slab.va+pl.memOff)
	case d.exportAPI == ExportAPIAddr:
		f, err = hlsys.MemExportDMABuf(d.b, m.addr, pl.size, pl.memOff)
	default:
		f, err = hlsys.MemExportDMABuf61(d.b, m.handle, pl.size)
	}
	if err != nil {
		d.mu.Lock()
		m.exports--
		d.mu.Unlock()
		return nil, d.ioErr(op, "", err)
	}
	d.mu.Lock()
	// Only a DMA-BUF that was made can reach the range (a refused export
	// made none): set before the export's count can drop, so before
	// any Free.
	m.exported = true
	d.mu.Unlock()
	if pl.memOff != offset {
		d.log.Debug().Uint64("offset", offset).Uint64("size", size).Uint64("export_start", pl.memOff).
			Uint64("export_size", pl.size).Msg("DMA-BUF exported from an earlier start; the offset is carried")
	}
	b := &DMABuf{d: d, f: f, mem: m, memOff: pl.memOff, offset: offset - pl.memOff, length: size, size: pl.size}
	b.id = d.track(b)
	return b, nil
}

// exportPlan is the range of an allocation a DMA-BUF export covers.
type exportPlan struct {
	memOff uint64 // first exported byte, in the allocation
	size   uint64 // exported bytes
}

// planExport picks the exported range for the wanted [offset, offset+size)
// of m (already checked to lie inside the allocation).
func (d *Device) planExport(m *DeviceMem, offset, size uint64) (exportPlan, error) {
	pg := d.hostPage
	end := offset + size
	if d.model.hasDeviceMMU() && d.exportAPI == ExportAPI61 {
		// The whole allocation, by handle; nothing to align.
		return exportPlan{0, m.allocSize}, nil
	}
	// Gaudi1: a physical address, Gaudi2/3: the VA MAP returned; either
	// way the allocation must start on a page, or its first page would
	// include memory that is not the allocation's.
	if m.addr%pg != 0 {
		return exportPlan{}, fmt.Errorf("allocation at %#x is not %d-byte aligned", m.addr, pg)
	}
	start := offset - offset%pg // the page holding the first wanted byte
	if d.model.hasDeviceMMU() && !d.ExportOffsetHonored() {
		// 6.3-6.6: never rely on the kernel's offset, and export the
		// whole allocation: those drivers map every importer of any
		// dma-buf of an allocation up to the size of its last export
		// (export_dmabuf_from_addr sets phys_pg_pack->exported_size,
		// hl_map_dmabuf maps up to it; hlsim RULES.md E7), so a smaller
		// export of another range would cut this one short.
		start = 0
		if whole := m.allocSize - m.allocSize%pg; whole >= end {
			end = whole
		}
	}
	stop, ok := alignUp(end, pg)
	if !ok || stop > m.allocSize {
		return exportPlan{}, fmt.Errorf("the range rounded to %d-byte pages passes the end of the allocation (%d bytes); the driver exports whole pages only", pg, m.allocSize)
	}
	return exportPlan{start, stop - start}, nil
}

func addrOf(m *DeviceMem) uint64 {
	if m == nil {
		return 0
	}
	return m.addr
}

// Close closes the descriptor and lets the memory be freed again. A
// second Close (or Close after Device.Close) returns nil. Importers that
// hold their own reference keep the device range alive in the kernel.
func (b *DMABuf) Close() error {
	if b == nil {
		return nil
	}
	return b.release()
}

func (b *DMABuf) release() error {
	d := b.d
	d.mu.Lock()
	if b.done {
		d.mu.Unlock()
		return nil
	}
	b.done = true
	delete(d.live, b.id)
	b.mem.exports--
	d.mu.Unlock()
	if err := b.f.Close(); err != nil {
		return newErr("close DMA-BUF", nil, "", err)
	}
	return nil
}
