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
// While a DMABuf is open its DeviceMem cannot be freed, and the device
// context lives on in the kernel until every copy of the fd is closed.
type DMABuf struct {
	d      *Device
	id     uint64
	f      *fd.FD
	mem    *DeviceMem
	offset uint64
	size   uint64

	done bool // guarded by d.mu
}

// FD returns the owned descriptor. Do not Disown or Close it; use
// DMABuf.Close. To hand it to another process, Dup it or send its Int()
// over SCM_RIGHTS while the DMABuf is open.
func (b *DMABuf) FD() *fd.FD { return b.f }

// Offset is the offset of the export in its DeviceMem.
func (b *DMABuf) Offset() uint64 { return b.offset }

// Size is the exported size.
func (b *DMABuf) Size() uint64 { return b.size }

// Mem is the exported device memory.
func (b *DMABuf) Mem() *DeviceMem { return b.mem }

// ExportDMABuf exports [offset, offset+size) of m as a DMA-BUF, with the
// API picked at open (ExportAPI):
//
//   - "addr+offset": Gaudi2/3 pass addr = m.Addr() (exactly the VA MAP
//     returned) and offset; offset must be page aligned and size at least
//     one page. Gaudi1 passes the physical address m.Addr()+offset with
//     offset 0 (page aligned as well). Kernels before the dma-buf offset fix
//     (about 6.7) validate a non-zero offset but ignore it; a warning is
//     logged in that case.
//   - "6.1 handle": Gaudi2/3 export the whole allocation by its handle, so
//     offset must be 0 and size m.Size() or m.AllocSize() (else
//     ErrNotSupported); the DMABuf then covers AllocSize. Gaudi1 passes the
//     physical address and size.
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
		return nil, newErr(op, ErrClosed, "memory already freed", nil)
	}
	if size == 0 {
		return nil, newErr(op, ErrInvalid, "size 0", nil)
	}
	if offset > m.allocSize || size > m.allocSize-offset {
		return nil, newErr(op, ErrInvalid, fmt.Sprintf("range outside the allocation of %d bytes", m.allocSize), nil)
	}
	pg := d.hostPage
	if d.exportAPI == ExportAPIAddr || !d.model.hasDeviceMMU() {
		if offset%pg != 0 || (m.addr+offset)%pg != 0 {
			return nil, newErr(op, ErrInvalid, fmt.Sprintf("offset and address must be %d-byte aligned", pg), nil)
		}
		if size < pg {
			return nil, newErr(op, ErrInvalid, fmt.Sprintf("size must be at least one page (%d bytes)", pg), nil)
		}
	}
	expSize := size
	if d.exportAPI == ExportAPI61 && d.model.hasDeviceMMU() {
		if offset != 0 || (size != m.size && size != m.allocSize) {
			return nil, newErr(op, ErrNotSupported,
				"the 6.1 export API exports whole allocations only (offset 0, size Size() or AllocSize())", nil)
		}
		expSize = m.allocSize
	}

	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.leave()
	d.mu.Lock()
	if m.freed {
		d.mu.Unlock()
		return nil, newErr(op, ErrClosed, "memory already freed", nil)
	}
	m.exports++ // blocks Free while the export is being made
	d.mu.Unlock()

	var (
		f   *fd.FD
		err error
	)
	switch {
	case d.exportAPI == ExportAPIAddr && d.model.hasDeviceMMU():
		if offset != 0 && !d.b.Emulated() && !releaseAtLeast(d.release, 6, 7) {
			d.log.Warn().Str("release", d.release).Uint64("offset", offset).
				Msg("kernels before ~6.7 ignore the DMA-BUF offset; the importer may see the range from offset 0")
		}
		f, err = hlsys.MemExportDMABuf(d.b, m.addr, size, offset)
	case d.exportAPI == ExportAPIAddr:
		f, err = hlsys.MemExportDMABuf(d.b, m.addr+offset, size, 0)
	case d.model.hasDeviceMMU():
		f, err = hlsys.MemExportDMABuf61(d.b, m.handle, m.allocSize)
	default:
		f, err = hlsys.MemExportDMABuf61(d.b, m.addr+offset, size)
	}
	if err != nil {
		d.mu.Lock()
		m.exports--
		d.mu.Unlock()
		return nil, wrapErr(op, err)
	}
	b := &DMABuf{d: d, f: f, mem: m, offset: offset, size: expSize}
	b.id = d.track(b)
	return b, nil
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
