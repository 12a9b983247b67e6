package hlsim

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// exportRec remembers how an importer sees one exported fd.
type exportRec struct {
	dev, ino uint64
	view     DMABufView
	// mapped is the allocation's exported size on 6.3-6.6 (nil
	// elsewhere): an importer maps up to it, at most view.Size (E7).
	mapped *atomic.Uint64
}

// DMABufView is what a DMA-BUF importer (a NIC registering the fd with
// ibv_reg_dmabuf_mr) reaches through an fd the emulator exported: byte k
// of the dma-buf, for k < Size, is byte Start+k of the exported file.
//
// The emulated dma-buf is an open file of a memfd holding the whole
// allocation (Gaudi2) or the whole DRAM arena (Gaudi1), so the file offset
// alone does not say where the dma-buf starts; the view does. It follows
// the emulated kernel: from 6.7 a Gaudi2 export of {addr, size, offset}
// starts at allocation byte offset; on 6.3-6.6 the driver validates the
// offset but builds the importer's scatter list from the first page of
// the allocation, so the dma-buf starts at allocation byte 0 whatever
// offset was passed (an importer then reads the wrong bytes); on 6.1 the
// whole allocation is exported. A Gaudi1 export starts at the physical
// address passed (file offset addr-dram_base_address).
type DMABufView struct {
	Start uint64 // file offset of dma-buf byte 0
	Size  uint64 // dma-buf size
}

// ErrNotExported is returned by DMABufView for an fd that is not (or no
// longer) a DMA-BUF this device exported.
var ErrNotExported = errors.New("hlsim: fd is not a DMA-BUF exported by this device")

// DMABufView returns the importer's view of fd, a DMA-BUF fd returned by
// EXPORT_DMABUF_FD on this device, as an importer mapping it now sees it
// (ibv_reg_dmabuf_mr maps at registration). The fd is looked up by number
// (it must be the number the export returned, still open on the same
// file). On 6.3-6.6 a Gaudi2 view ends at the size of the allocation's
// last export, if smaller than the dma-buf (RULES.md E7).
func (d *Device) DMABufView(fd int) (DMABufView, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return DMABufView{}, fmt.Errorf("%w: %w", ErrNotExported, err)
	}
	d.expMu.Lock()
	defer d.expMu.Unlock()
	r, ok := d.exports[fd]
	if !ok || r.dev != st.Dev || r.ino != st.Ino {
		return DMABufView{}, ErrNotExported
	}
	v := r.view
	if r.mapped != nil {
		v.Size = min(v.Size, r.mapped.Load())
	}
	return v, nil
}

// ReadAt reads len(p) bytes at dma-buf offset off of fd the way an
// importer would (bounded by the view's size).
func (v DMABufView) ReadAt(fd int, p []byte, off uint64) (int, error) {
	if off >= v.Size {
		return 0, unix.EINVAL
	}
	p = p[:min(uint64(len(p)), v.Size-off)]
	return unix.Pread(fd, p, int64(v.Start+off))
}

func (d *Device) recordExport(fd int, v DMABufView, mapped *atomic.Uint64) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return
	}
	d.expMu.Lock()
	d.exports[fd] = exportRec{dev: st.Dev, ino: st.Ino, view: v, mapped: mapped}
	d.expMu.Unlock()
}

// export serves EXPORT_DMABUF_FD (export_dmabuf_from_addr and its
// validate_export_params* helpers, per kernel generation; RULES.md). The
// fd is a new open file description of a memfd (see DMABufView); the
// flags are the dma-buf file flags, taken as dma_buf_export and
// dma_buf_fd take them: the access mode (O_ACCMODE; 3 opens read-write)
// and O_CLOEXEC, anything else ignored.
func (c *hctx) export(a *hlsys.MemArgs) error {
	d := c.d
	flags := a.Flags
	var (
		fd     int
		view   DMABufView
		mapped *atomic.Uint64 // 6.3-6.6 Gaudi2: the allocation's exported size (E7)
		err    error
	)
	if d.amap.gaudi2 {
		var (
			al *allocation
			m  *mapping
		)
		if d.exportNew {
			addr, size, off := a.U[0], a.U[1], a.U[2]
			if c.dmmu.contains(addr) {
				if mm := c.dmmu.find(addr); mm != nil && mm.ret == addr && mm.kind == mapDRAM {
					m, al = mm, mm.alloc
				}
			}
			if al == nil {
				c.log.Debug().Uint64("addr", addr).Msg("EXPORT_DMABUF_FD: map address not found")
				return unix.EINVAL
			}
			if d.exportFix {
				// validate_export_params_common (6.7+): addr, size and
				// offset page aligned, size not 0.
				if addr%pageSize != 0 || size == 0 || size%pageSize != 0 || off%pageSize != 0 {
					c.log.Debug().Uint64("size", size).Uint64("offset", off).Msg("EXPORT_DMABUF_FD: addr/size/offset not page multiples")
					return unix.EINVAL
				}
				view = DMABufView{Start: off, Size: size}
			} else {
				// 6.3-6.6: the exported address addr+offset must be page
				// aligned and size at least a page; the offset is then
				// ignored when the importer's SG table is built.
				if (addr+off)%pageSize != 0 || size < pageSize {
					c.log.Debug().Uint64("size", size).Uint64("offset", off).Msg("EXPORT_DMABUF_FD: addr+offset unaligned or size below a page")
					return unix.EINVAL
				}
				view = DMABufView{Start: 0, Size: size}
			}
			if off+size < off || off+size > al.size {
				c.log.Debug().Uint64("size", size).Uint64("offset", off).Msg("EXPORT_DMABUF_FD: offset and size exceed the allocation")
				return unix.EINVAL
			}
			if !d.exportFix {
				// MEM66 export_dmabuf_from_addr, once the parameters
				// are valid: phys_pg_pack->exported_size = size, which
				// every importer of any dma-buf of the allocation then
				// maps up to (E7).
				al.exportedSize.Store(size)
				mapped = &al.exportedSize
			}
		} else {
			// 6.1: the handle; the whole allocation is exported, size ignored.
			if al = c.allocs[a.U[0]]; al == nil {
				return unix.EINVAL
			}
			view = DMABufView{Start: 0, Size: al.size}
		}
		if fd, err = c.exportAlloc(al, flags); err != nil {
			return err
		}
		if m != nil {
			m.exported = true
		}

	} else {
		addr, size := a.U[0], a.U[1]
		if d.exportNew && a.U[2] != 0 {
			c.log.Debug().Msg("EXPORT_DMABUF_FD: offset is not allowed in device without virtual memory")
			return unix.EINVAL
		}
		sizeBad := size < pageSize
		if d.exportFix {
			sizeBad = size == 0 || size%pageSize != 0
		}
		base, end := d.amap.dramBase, d.amap.dramBase+d.amap.dramSize
		if addr%pageSize != 0 || sizeBad || addr < base || addr+size < addr || addr+size > end {
			c.log.Debug().Uint64("addr", addr).Uint64("size", size).Msg("EXPORT_DMABUF_FD: not a DRAM range")
			return unix.EINVAL
		}
		if fd, err = reopenFD(d.arenaFD, exportOpenFlags(flags)); err != nil {
			return errnoOf(err)
		}
		view = DMABufView{Start: addr - base, Size: size}
	}
	d.recordExport(fd, view, mapped)
	setOut(a, uint64(uint32(int32(fd))))
	return nil
}

// exportOpenFlags turns dma-buf file flags into open(2) flags for the
// emulated dma-buf: the access mode (3, not a valid open mode, opens
// read-write) and O_CLOEXEC.
func exportOpenFlags(flags uint32) int {
	mode := int(flags) & unix.O_ACCMODE
	if mode == unix.O_ACCMODE {
		mode = unix.O_RDWR
	}
	return mode | int(flags)&unix.O_CLOEXEC
}

func (c *hctx) exportAlloc(al *allocation, flags uint32) (int, error) {
	if c.d.leases && al.ref < 0 {
		ref, err := reopenFD(al.memfd, unix.O_RDWR|unix.O_CLOEXEC)
		if err != nil {
			return -1, errnoOf(err)
		}
		al.ref = ref
	}
	fd, err := reopenFD(al.memfd, exportOpenFlags(flags))
	if err != nil {
		return -1, errnoOf(err)
	}
	al.exported = true
	return fd, nil
}

// reopenFD opens a new open file description of fd's file with the given
// open flags, as an exported DMA-BUF fd.
func reopenFD(fd, flags int) (int, error) {
	return unix.Open("/proc/self/fd/"+strconv.Itoa(fd), flags, 0)
}
