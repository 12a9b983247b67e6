package hlsim

import (
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// cbuf is a kernel command buffer: emulator-owned shared anonymous
// memory that the user fills through Mmap and the emulator reads
// directly.
type cbuf struct {
	id         uint64
	size       uint32 // cb->size: the requested size, at least PAGE_SIZE
	mem        []byte // page-rounded, the emulator's (the driver's memory)
	user       []byte // the user's mmap: a second mapping of mem's pages (nil: none)
	userMapped bool
	unmapped   []bool // pages of the user mmap a partial Munmap removed (nil: none)
	destroyed  bool
	inUse      atomic.Int32 // jobs of CSs in flight that use it (usage_cnt)
	waitRefs   atomic.Int32 // KERNEL_CQ waits reading it (their hl_cb_get); taken under memMu (read)
	vaMap      *mapping     // CB_FLAGS_MAP: its device VA mapping
}

func (cb *cbuf) handle() uint64 { return (cb.id | hlsys.MmapTypeCB) << 12 }

func (cb *cbuf) release() {
	if cb.mem != nil {
		_ = unix.Munmap(cb.mem)
		cb.mem = nil
	}
}

// lookupCB returns the live CB behind handle (memMu held). As
// hl_mmap_mem_buf_get, the id is the low 32 bits of handle >> PAGE_SHIFT:
// the in-page bits and the mmap type bits are not checked.
func (c *hctx) lookupCB(handle uint64) *cbuf {
	return c.cbs[uint64(uint32(handle>>12))]
}

// cbIoctl serves HL_IOCTL_CB.
func (c *hctx) cbIoctl(a *hlsys.CBArgs) error {
	if !c.d.operational() {
		return unix.EBUSY
	}
	switch a.Op {
	case hlsys.CBOpCreate, hlsys.CBOpDestroy, hlsys.CBOpInfo:
	default:
		return unix.EINVAL
	}
	c.memMu.Lock()
	defer c.memMu.Unlock()
	if c.memDead {
		return unix.ENODEV
	}
	switch a.Op {
	case hlsys.CBOpCreate:
		// hl_cb_ioctl clears the args and writes cb_handle (0 on a
		// failure) whether CREATE succeeded or not.
		err := c.cbCreate(a)
		if err != nil {
			*a = hlsys.CBArgs{}
		}
		return err
	case hlsys.CBOpDestroy:
		cb := c.lookupCB(a.Handle)
		if cb == nil || cb.destroyed { // hl_cb_destroy: is_handle_destroyed
			return unix.EINVAL
		}
		cb.destroyed = true
		// DESTROY drops the handle's reference only
		// (hl_mmap_mem_buf_put_handle); a user mmap holds another
		// (hl_mem_mgr_mmap), and while it lives the handle resolves and
		// the CB keeps its memory and device VA. The last put frees them
		// (hl_cb_mmap_mem_release, cb_unmap_mem): here or at Munmap.
		// The reference a Gaudi1 job holds on its kernel CB is not
		// modeled (RULES.md B9).
		if !cb.userMapped && cb.waitRefs.Load() == 0 {
			c.freeCB(cb)
		}
		return nil
	default: // INFO
		cb := c.lookupCB(a.Handle)
		if cb == nil {
			return unix.EINVAL
		}
		if a.Flags&hlsys.CBFlagsGetDeviceVA != 0 {
			if cb.vaMap == nil {
				c.log.Debug().Uint64("handle", a.Handle).Msg("CB INFO: CB is not mapped to the device MMU")
				return unix.EINVAL
			}
			a.Handle = cb.vaMap.ret // hl_cb_ioctl clears args->out only
			return nil
		}
		a.Handle = uint64(uint32(cb.inUse.Load())) // usage_cnt, pad 0
		return nil
	}
}

func (c *hctx) cbCreate(a *hlsys.CBArgs) error {
	size := a.CBSize
	if size > hlsys.MaxCBSize {
		c.log.Debug().Uint32("size", size).Msg("CB CREATE: size above HL_MAX_CB_SIZE")
		return unix.EINVAL
	}
	// hl_cb_mmap_mem_alloc: "Minimum allocation must be PAGE SIZE" (a
	// size of 0 included); the CB's size is then what a chunk may use.
	size = max(size, pageSize)
	mapCB := a.Flags&hlsys.CBFlagsMap != 0
	if mapCB && !c.d.amap.gaudi2 {
		// cb_map_mem's -EINVAL is raised in the alloc callback of
		// hl_mmap_mem_buf_alloc, which returns NULL on any failure:
		// hl_cb_create answers -ENOMEM.
		c.log.Debug().Msg("CB CREATE: mapping a CB to the device MMU is not supported on Gaudi")
		return unix.ENOMEM
	}
	n := (uint64(size) + pageSize - 1) &^ (pageSize - 1)
	mem, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return unix.ENOMEM
	}
	cb := &cbuf{id: c.nextCB, size: size, mem: mem}
	if mapCB {
		va, err := c.pmmu.alloc(n, 0, pageSize, false)
		if err != nil {
			cb.release()
			return err
		}
		cb.vaMap = &mapping{va: va, size: n, span: n, ret: va, kind: mapLocal, mem: mem}
		c.pmmu.insert(cb.vaMap)
	}
	c.nextCB++
	c.cbs[cb.id] = cb
	*a = hlsys.CBArgs{Handle: cb.handle()}
	return nil
}

// Mmap implements hlsys.Backend for kernel CBs: offset is the CB handle and
// length must be exactly the CB size rounded up to a page. One live
// mapping per CB. The returned bytes are a mapping of the CB's pages of
// their own (the CB stays the emulator's after a Munmap).
func (c *hctx) Mmap(offset int64, length int) ([]byte, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	c.memMu.Lock()
	defer c.memMu.Unlock()
	if c.memDead {
		return nil, unix.ENODEV
	}
	// hl_mmap dispatches on the mmap type bits: the block type goes to
	// the ASIC's block mmap, the CB type to the CB manager
	// (hl_mem_mgr_mmap).
	if uint64(offset)&(pageSize-1) == 0 && (uint64(offset)>>12)&hlsys.MmapTypeBlock != 0 {
		return c.mmapBlock(uint64(offset), length)
	}
	if uint64(offset)&(pageSize-1) != 0 || (uint64(offset)>>12)&hlsys.MmapTypeCB == 0 {
		return nil, unix.EINVAL
	}
	cb := c.lookupCB(uint64(offset))
	if cb == nil || cb.userMapped || length != len(cb.mem) {
		return nil, unix.EINVAL
	}
	// The user's mapping is its own (the driver maps the CB's pages into
	// the process, hl_cb_mmap), so that a munmap of it leaves the
	// emulator's view alone and a touch of what it removed faults.
	// mremap with old_size 0 maps a shared mapping's pages again.
	p, err := unix.MremapPtr(unsafe.Pointer(&cb.mem[0]), 0, nil, uintptr(length), unix.MREMAP_MAYMOVE)
	if err != nil {
		return nil, unix.ENOMEM
	}
	cb.user = unsafe.Slice((*byte)(p), length)
	cb.userMapped = true
	c.cbMmaps[&cb.user[0]] = cb
	c.d.st.userMaps.Add(1)
	return cb.user, nil
}

// unmapUser ends the user's mapping of cb (memMu held): a touch of it
// faults from here on.
func (cb *cbuf) unmapUser() {
	if cb.user != nil {
		_ = unix.MunmapPtr(unsafe.Pointer(&cb.user[0]), uintptr(len(cb.user)))
		cb.user = nil
	}
	cb.userMapped = false
	cb.unmapped = nil
}

// Munmap implements hlsys.Backend. As munmap(2) takes it, b must start
// on a page (EINVAL) and its length is rounded up to pages; the range may
// hold part of a mapping, several mappings, and pages that are no mapping
// of the device (RULES.md B10; torvalds/linux mm/vma.c do_vmi_munmap,
// do_vmi_align_munmap, vms_gather_munmap_vmas): every mapping of the
// device it overlaps loses the pages in the range (its vma split and the
// part inside closed), and the driver's close drops a mapping's
// reference only once the closed parts add up to the whole
// (hl_mmap_mem_buf_vm_close's real_mapped_size, hw_block_vm_close's
// mapped_size). A touch of a CB's pages unmapped faults (they are made
// inaccessible at once and unmapped with the rest, so that no other
// mapping lands in the hole); so does a touch of a Gaudi3 block's
// mapping once unmapped (each is a mapping of its own of the register
// file's page, gaudi3_mmap.go). The pages of the range that are no
// mapping of the device are left alone (munmap(2) would unmap them too;
// here they may be Go memory), and a range with no mapping of the device
// in it (unmapped already, or never mapped) answers 0 and changes
// nothing; only a start not page aligned or a length of 0 is EINVAL, as
// there. A range reaching past TASK_SIZE (EINVAL too) cannot be a Go
// slice. After the context's release it undoes only the mappings a
// Device.Close left in place (teardown); others are gone already (Close
// released them) and unmapping them is a no-op.
func (c *hctx) Munmap(b []byte) error {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if len(b) == 0 || lo%pageSize != 0 {
		return unix.EINVAL
	}
	hi := lo + (uintptr(len(b))+pageSize-1)&^(pageSize-1)
	c.memMu.Lock()
	defer c.memMu.Unlock()
	for _, cb := range c.cbMmaps {
		c.munmapCB(cb, lo, hi)
	}
	c.munmapBlocks(lo, hi)
	return nil
}

// munmapCB unmaps the pages of cb's user mapping in [lo, hi), both page
// aligned (memMu held).
func (c *hctx) munmapCB(cb *cbuf, lo, hi uintptr) {
	base := uintptr(unsafe.Pointer(&cb.user[0]))
	end := base + uintptr(len(cb.user)) // page-rounded (Mmap)
	if hi <= base || end <= lo {
		return
	}
	first, last := int((max(lo, base)-base)/pageSize), int((min(hi, end)-base)/pageSize)
	if cb.unmapped == nil {
		cb.unmapped = make([]bool, len(cb.user)/pageSize)
	}
	for p := first; p < last; p++ {
		cb.unmapped[p] = true
	}
	if slices.Contains(cb.unmapped, false) {
		// Part of the mapping is left: it keeps the CB. The part
		// removed faults from now on.
		_ = unix.Mprotect(cb.user[first*pageSize:last*pageSize], unix.PROT_NONE)
		return
	}
	delete(c.cbMmaps, &cb.user[0])
	cb.unmapUser()
	c.d.st.userMaps.Add(-1)
	// hl_mmap_mem_buf_vm_close puts the mapping's reference: the last
	// one (handle destroyed, or the context released) frees the CB.
	if (cb.destroyed || c.memDead) && cb.waitRefs.Load() == 0 {
		c.freeCB(cb)
	}
}

// putCB drops a wait's reference on cb; the last reference of a
// destroyed CB (or of any CB once the context released its memory) that
// is not mapped by the user frees it.
func (c *hctx) putCB(cb *cbuf) {
	if cb.waitRefs.Add(-1) != 0 {
		return
	}
	c.memMu.Lock()
	if cb.waitRefs.Load() == 0 && (c.memDead || cb.destroyed) && !cb.userMapped {
		c.freeCB(cb)
	}
	c.memMu.Unlock()
}

// freeCB drops a destroyed CB's handle, device VA mapping and memory, as
// the driver's last reference put does (memMu held).
func (c *hctx) freeCB(cb *cbuf) {
	if c.cbs[cb.id] == cb {
		delete(c.cbs, cb.id)
	}
	if cb.vaMap != nil {
		c.pmmu.remove(cb.vaMap)
		cb.vaMap = nil
	}
	cb.release()
}
