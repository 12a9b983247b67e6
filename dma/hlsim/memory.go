package hlsim

import (
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// allocation is a Gaudi2 device memory allocation (an ALLOC handle). Each
// has its own sparse memfd, mapped shared into the emulator: the DMMU
// translates to that mapping, and a DMA-BUF export is a fresh open of the
// memfd.
type allocation struct {
	handle   uint64
	size     uint64 // rounded up to the page size
	memfd    int
	ref      int // private O_RDWR reopen for the export lease probe; -1 until the first export
	mem      []byte
	maps     int  // live MAPs of the handle
	exported bool // a DMA-BUF of it was exported
	// exportedSize is the size of its last export on 6.3-6.6, where
	// the driver keeps one per allocation and maps every importer of
	// any of its dma-bufs up to it (RULES.md E7).
	exportedSize atomic.Uint64
}

func (al *allocation) release() {
	if al.mem != nil {
		_ = unix.Munmap(al.mem)
		al.mem = nil
	}
	if al.memfd >= 0 {
		_ = unix.Close(al.memfd)
		al.memfd = -1
	}
	if al.ref >= 0 {
		_ = unix.Close(al.ref)
		al.ref = -1
	}
}

// memIoctl serves HL_IOCTL_MEMORY.
func (c *hctx) memIoctl(a *hlsys.MemArgs) error {
	if !c.d.operational() {
		return unix.EBUSY
	}
	switch a.Op {
	case hlsys.MemOpAlloc, hlsys.MemOpFree, hlsys.MemOpMap, hlsys.MemOpUnmap, hlsys.MemOpExportDMABuf:
	case hlsys.MemOpMapBlock:
		if !c.d.amap.gaudi3 {
			return unix.EOPNOTSUPP // the Gaudi1/2 HW block lists are not emulated
		}
	case hlsys.MemOpTSAlloc:
		return unix.EOPNOTSUPP // timestamp buffers are not emulated
	default:
		return unix.EINVAL
	}
	c.memMu.Lock()
	defer c.memMu.Unlock()
	if c.memDead {
		if err := c.usable(); err != nil {
			return err
		}
		return unix.ENODEV
	}
	// hl_mem_ioctl clears the args of ALLOC (past its size-0 check), MAP
	// and EXPORT_DMABUF_FD and writes their output whether the call
	// succeeded or not: handle 0, VA 0 ("Assume failure" in
	// map_device_va), fd -EBADF.
	var err error
	switch a.Op {
	case hlsys.MemOpAlloc:
		if a.U[0] == 0 {
			c.log.Debug().Msg("ALLOC: size 0")
			return unix.EINVAL // "alloc size must be larger than 0", args kept
		}
		if err = c.memAlloc(a); err != nil {
			setOut(a, 0)
		}
	case hlsys.MemOpFree:
		return c.memFree(a)
	case hlsys.MemOpMap:
		if a.Flags&hlsys.MemUserPtr != 0 {
			err = c.mapHost(a)
		} else {
			err = c.mapDevice(a)
		}
		if err != nil {
			setOut(a, 0)
		}
	case hlsys.MemOpUnmap:
		return c.unmap(a)
	case hlsys.MemOpMapBlock:
		// map_block zeroes out.block_handle and out.block_size (the u32
		// after it) first; the rest of the union stays.
		if err = c.mapBlock(a); err != nil {
			a.U[0], a.U[1] = 0, a.U[1]&^0xFFFF_FFFF
		}
	default:
		if err = c.export(a); err != nil {
			ebadf := -int32(unix.EBADF)
			setOut(a, uint64(uint32(ebadf)))
		}
	}
	return err
}

// setOut clears the union and stores the 64-bit output, as the driver
// does (memset, then out.handle / out.device_virt_addr / out.fd).
func setOut(a *hlsys.MemArgs, v uint64) {
	*a = hlsys.MemArgs{}
	a.U[0] = v
}

func (c *hctx) memAlloc(a *hlsys.MemArgs) error {
	size, psize := a.U[0], a.U[1]
	dramSize := c.d.amap.dramSize
	if !c.d.amap.gaudi2 {
		// No MMU in front of DRAM: the driver only adds the size to its
		// accounting ("can't ensure the validity"), handle 0, no limit.
		c.dramUsed += size
		setOut(a, 0)
		return nil
	}
	// set_alloc_page_size (memory.c) honours a user page size only when
	// the ASIC sets supports_user_set_page_size; Gaudi2 does not
	// (gaudi2_set_fixed_properties, gaudi2_set_dram_properties), so its
	// ALLOC takes the default page whatever page_size holds; Gaudi3
	// sets it (gaudi3_set_fixed_properties, as docs/gaudi3.md read it).
	if psize == 0 || !c.d.amap.gaudi3 {
		psize = c.d.amap.dramPage
	} else if psize&(psize-1) != 0 {
		c.log.Debug().Uint64("page_size", psize).Msg("ALLOC: user page size is not a power of 2")
		return unix.EINVAL
	}
	n := (size + psize - 1) / psize * psize
	if n < size || n > dramSize-c.dramUsed {
		return unix.ENOMEM
	}
	name := c.d.name + "-dram-" + strconv.FormatUint(c.nextHandle, 10)
	fd, mem, err := newMemfd(name, n)
	if err != nil {
		c.log.Warn().Err(err).Uint64("size", n).Msg("ALLOC: backing memfd")
		return unix.ENOMEM
	}
	al := &allocation{handle: c.nextHandle, size: n, memfd: fd, ref: -1, mem: mem}
	c.nextHandle++
	c.allocs[al.handle] = al
	c.dramUsed += n
	setOut(a, al.handle)
	return nil
}

func (c *hctx) memFree(a *hlsys.MemArgs) error {
	if !c.d.amap.gaudi2 {
		// Gaudi1 FREE subtracts the size at offset 0 from the accounting,
		// unchecked (the driver's counters are signed and may go below 0).
		c.dramUsed -= a.U[0]
		return nil
	}
	al := c.allocs[a.U[0]]
	switch {
	case al == nil:
		return unix.EINVAL
	case al.maps > 0:
		c.log.Debug().Uint64("handle", al.handle).Msg("FREE: handle is mapped")
		return unix.EINVAL
	case c.exportsLive(al):
		c.log.Debug().Uint64("handle", al.handle).Msg("FREE: handle is exported")
		return unix.EINVAL
	}
	delete(c.allocs, al.handle)
	c.dramUsed -= al.size
	al.release()
	return nil
}

// mapHost serves MAP with USERPTR (map_device_va, hl_pin_host_memory,
// init_phys_pg_pack_from_userptr, get_va_block).
func (c *hctx) mapHost(a *hlsys.MemArgs) error {
	host, hint, size := a.U[0], a.U[1], a.U[2]
	end := (host + size + pageSize - 1) &^ (pageSize - 1)
	if size == 0 || host+size < host || end < host+size {
		c.log.Debug().Uint64("host", host).Uint64("size", size).Msg("MAP USERPTR: size 0 or the range overflows")
		return unix.EINVAL
	}
	if err := hostRangeMapped(host, size); err != nil {
		c.log.Debug().Uint64("host", host).Uint64("size", size).Msg("MAP USERPTR: range not mapped")
		return unix.EFAULT
	}
	start := host &^ (pageSize - 1)
	span, off := end-start, host-start
	// The driver maps with 2 MiB PMMU pages only when every DMA segment
	// of the pinned pages is 2 MiB aligned and a multiple of 2 MiB. The
	// emulator cannot see DMA addresses; it takes hugetlbfs backing of a
	// 2 MiB-aligned range of whole 2 MiB pages as that case.
	space, align := c.pmmu, uint64(pageSize)
	switch {
	case hugeTLBBacked(start, end):
		space, align = c.pmmuHuge, hugePageSize
	case host%hugePageSize == 0:
		align = hugePageSize // a 2 MiB-aligned host VA gets a 2 MiB-aligned device VA
	}
	force := a.Flags&hlsys.MemForceHint != 0
	if hint != 0 && off != 0 && force {
		c.log.Debug().Uint64("hint", hint).Msg("MAP USERPTR: hint cannot be respected because source memory is not aligned")
		return unix.EINVAL
	}
	va, err := space.alloc(span, hint, align, force)
	if err != nil {
		return err
	}
	m := &mapping{va: va, size: span, span: span, ret: va + off, kind: mapHost, host: start}
	space.insert(m)
	setOut(a, m.ret)
	return nil
}

func (c *hctx) mapDevice(a *hlsys.MemArgs) error {
	if !c.d.amap.gaudi2 {
		c.log.Debug().Msg("MAP: Gaudi has no device MMU for DRAM")
		return unix.EINVAL
	}
	hint, handle := a.U[0], a.U[1]
	al := c.allocs[handle]
	if al == nil {
		return unix.EINVAL
	}
	page := c.d.amap.dramPage
	span := (al.size + page - 1) / page * page
	va, err := c.dmmu.alloc(span, hint, page, a.Flags&hlsys.MemForceHint != 0)
	if err != nil {
		return err
	}
	m := &mapping{va: va, size: al.size, span: span, ret: va, kind: mapDRAM, mem: al.mem, alloc: al}
	c.dmmu.insert(m)
	al.maps++
	setOut(a, va)
	return nil
}

// lookupExact finds the user mapping whose MAP returned exactly va.
func (c *hctx) lookupExact(va uint64) (*mapping, *vaSpace) {
	for _, s := range []*vaSpace{c.dmmu, c.pmmu, c.pmmuHuge} {
		if s == nil || !s.contains(va) {
			continue
		}
		if m := s.find(va); m != nil && m.ret == va && m.kind != mapLocal {
			return m, s
		}
	}
	return nil, nil
}

func (c *hctx) unmap(a *hlsys.MemArgs) error {
	va := a.U[0]
	m, space := c.lookupExact(va)
	if m == nil {
		c.log.Debug().Uint64("va", va).Msg("UNMAP: not a VA returned by MAP")
		return unix.EINVAL
	}
	if m.kind == mapDRAM && m.exported && c.exportsLive(m.alloc) {
		c.log.Debug().Uint64("va", va).Msg("UNMAP: a DMA-BUF exported from this VA is still open")
		return unix.EINVAL
	}
	space.remove(m)
	if m.alloc != nil {
		m.alloc.maps--
	}
	return nil
}

// exportsLive reports whether a DMA-BUF exported from al may still be open.
// The emulator cannot see an fd close, but a write lease on its private
// reopen of the memfd is granted only when no other open file description
// of the memfd exists (an exported fd, a dup of it, a process it was sent
// to, or an mmap of it). Without leases, an export pins al until the
// context closes.
func (c *hctx) exportsLive(al *allocation) bool {
	if !al.exported {
		return false
	}
	if !c.d.leases || al.ref < 0 {
		return true
	}
	return writeLeaseBusy(al.ref) != errNotBusy
}

// releaseMemory frees everything the context holds (memMu held, engines
// stopped). With keep (the device closed under the context) a CB the user
// still has mapped keeps its memory, in cbMmaps, until Munmap or Close:
// the mapping holds the CB (hl_mem_mgr_mmap's reference, put in
// hl_mmap_mem_buf_vm_close; hl_mem_mgr_fini finds such a CB "still
// alive"). Otherwise the context's Close undoes the user's mappings
// (hlsys.Backend).
func (c *hctx) releaseMemory(keep bool) {
	for _, al := range c.allocs {
		al.release()
	}
	clear(c.allocs)
	// The VA spaces go below: no CB keeps a device VA.
	for _, cb := range c.cbs {
		cb.vaMap = nil
	}
	if !keep {
		c.releaseUserMaps()
	}
	// A CB a KERNEL_CQ wait still reads is freed by that wait (putCB).
	for _, cb := range c.cbs {
		if cb.waitRefs.Load() == 0 && !cb.userMapped {
			cb.release()
		}
	}
	clear(c.cbs)
	for _, s := range []*vaSpace{c.dmmu, c.pmmu, c.pmmuHuge} {
		if s != nil {
			s.maps = nil
		}
	}
	c.dramUsed = 0
}

// releaseUserMaps undoes the user mmaps still in place (memMu held), as
// the context's Close does (hlsys.Backend), the engines stopped: the CBs'
// (freed unless a KERNEL_CQ wait still reads one: putCB) and the Gaudi3
// blocks a Device.Close left mapped (g3kept).
func (c *hctx) releaseUserMaps() {
	for _, cb := range c.cbMmaps {
		cb.unmapUser()
		c.d.st.userMaps.Add(-1)
		if cb.waitRefs.Load() == 0 && (cb.destroyed || c.memDead) {
			c.freeCB(cb)
		}
	}
	clear(c.cbMmaps)
	for _, g := range c.g3kept {
		c.unmapBlock(g)
	}
	c.g3kept = nil
}

func errnoOf(err error) error {
	if e, ok := err.(unix.Errno); ok {
		return e
	}
	return unix.EIO
}
