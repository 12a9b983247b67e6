package dma

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// Device memory smaller than the allocation page is carved from shared
// allocations (slabs).
//
// The driver rounds every ALLOC up to its allocation page
// (alloc_device_memory in common/memory.c), and on Gaudi2 that page is
// 16 x num_functional_hbms x 8 MiB, 768 MiB with six HBMs
// (gaudi2_set_dram_properties, a TLB workaround; the user's page size is
// ignored: hlsim RULES M4); on Gaudi3 the default is 32 MiB. One ALLOC
// per buffer would give each 4 KiB buffer a whole page, and a Gaudi2
// fewer than 128 buffers in all. So a buffer smaller than the page is
// carved, host-page aligned, from a slab: one ALLOC+MAP of one page.
//
// Only where a DMA-BUF export can be confined to the buffer: the export's
// offset is honoured (kernels 6.7+, DRM accel numbering: ExportOffsetHonored).
// On older kernels an export starts at the allocation (6.3-6.6) or covers
// it whole (6.1), so a buffer exported from a slab would hand its
// neighbours to the importer; there every buffer has its own allocation.
//
// A buffer that was ever exported does not give its range back when
// freed: an importer may still hold the DMA-BUF and reach those pages
// (the driver keeps a mapping only while its own export count says so,
// unmap_device_va, and that count is the slab's, not the buffer's). The
// range comes back with the slab, whose UNMAP the driver refuses while any
// of its exports lives.

// slab is one ALLOC+MAP carved into buffers.
type slab struct {
	handle, va, size uint64
	free             *rangeAlloc // free ranges of [va, va+size)
	live             int         // buffers carved and not yet freed
	// unmapped: its UNMAP was done and its FREE refused; nothing is
	// carved from it, and a later release retries the FREE alone.
	unmapped bool
}

// slabs is a Device's set of slabs.
type slabs struct {
	mu   sync.Mutex
	list []*slab
}

// subAllocates reports whether an allocation of size bytes is carved from
// a slab.
func (d *Device) subAllocates(size uint64) bool {
	// A page that is not a host-page multiple (no driver reports one)
	// would not hold a host-page-rounded size just below it.
	return d.model.hasDeviceMMU() && d.ExportOffsetHonored() &&
		d.allocPage > d.hostPage && d.allocPage%d.hostPage == 0 && size < d.allocPage
}

// allocFromSlab carves m (size already set) from a slab. Called inside
// the device's gate (enter).
func (d *Device) allocFromSlab(op string, m *DeviceMem) error {
	n, ok := alignUp(m.size, d.hostPage)
	if !ok {
		return newErr(op, ErrNoMemory, "size too large", nil)
	}
	s, va, err := d.carve(op, n)
	if err != nil {
		return err
	}
	m.slab, m.addr, m.allocSize, m.handle = s, va, n, s.handle
	return nil
}

// carve returns n bytes (a host-page multiple below the allocation page)
// from a slab, making a new slab when none has room.
func (d *Device) carve(op string, n uint64) (*slab, uint64, error) {
	sl := &d.slabs
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for _, s := range sl.list {
		if s.unmapped {
			continue
		}
		if va, ok := s.free.alloc(n); ok {
			s.live++
			return s, va, nil
		}
	}
	// No room: an empty slab here has its ranges held by buffers that
	// were exported. Its UNMAP, which the driver refused while an importer
	// held a DMA-BUF, is tried again before the device gives another page.
	d.releaseEmptySlabsLocked(op)
	h, err := hlsys.MemAlloc(d.b, d.allocPage, 0, 0)
	if err != nil {
		return nil, 0, d.ioErr(op, "", err)
	}
	va, err := hlsys.MemMapDevice(d.b, h, 0, 0)
	if err != nil {
		if ferr := hlsys.MemFree(d.b, h); ferr != nil {
			d.log.Warn().Err(ferr).Uint64("handle", h).Msg("free after failed map")
		}
		return nil, 0, d.ioErr(op, "map", err)
	}
	s := &slab{handle: h, va: va, size: d.allocPage, free: newRangeAlloc(va, d.allocPage, d.hostPage)}
	sl.list = append(sl.list, s)
	addr, _ := s.free.alloc(n) // n <= allocPage, both host-page multiples (subAllocates)
	s.live++
	d.log.Debug().Uint64("va", va).Uint64("size", d.allocPage).Int("slabs", len(sl.list)).Msg("device memory slab allocated")
	return s, addr, nil
}

// releaseFromSlab gives m's range back to its slab (m was freed by the
// caller's bookkeeping). exported: m had a DMA-BUF export, so its range is
// not reused.
func (d *Device) releaseFromSlab(op string, m *DeviceMem, exported bool) error {
	return d.uncarve(op, m.slab, m.addr, m.allocSize, exported)
}

// uncarve gives [va, va+n) back to s (unless retire) and releases the
// slab once nothing is carved from it.
func (d *Device) uncarve(op string, s *slab, va, n uint64, retire bool) error {
	sl := &d.slabs
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if !retire {
		s.free.free(va, n)
	}
	s.live--
	if s.live > 0 {
		return nil
	}
	if d.gone {
		sl.list = slices.DeleteFunc(sl.list, func(x *slab) bool { return x == s })
		return nil
	}
	return d.releaseSlabLocked(op, s)
}

// releaseEmptySlabs releases the slabs nothing is carved from (kept after
// a refused UNMAP) and reports whether one was: an ALLOC of whole pages
// that found no room tries again (their page may be the one it needs).
func (d *Device) releaseEmptySlabs(op string) bool {
	d.slabs.mu.Lock()
	defer d.slabs.mu.Unlock()
	return d.releaseEmptySlabsLocked(op)
}

// releaseEmptySlabsLocked is releaseEmptySlabs with d.slabs.mu held.
func (d *Device) releaseEmptySlabsLocked(op string) bool {
	released := false
	for _, s := range slices.Clone(d.slabs.list) {
		if s.live == 0 {
			if err := d.releaseSlabLocked(op, s); err != nil {
				d.log.Debug().Err(err).Msg("slab kept")
			} else {
				released = true
			}
		}
	}
	return released
}

// releaseSlabLocked unmaps and frees an empty slab (sl.mu held). When the
// driver refuses the UNMAP (an importer still holds a DMA-BUF of it: X12
// in hlsim's RULES; or the device is not operational) the slab stays, its
// free ranges still usable, for a later release or Close to retry; when it
// refuses the FREE that follows, the slab stays too, unmapped.
func (d *Device) releaseSlabLocked(op string, s *slab) error {
	if !s.unmapped {
		if err := hlsys.MemUnmap(d.b, s.va); err != nil {
			return d.ioErr(fmt.Sprintf("%s: unmap its slab %#x", op, s.va), "", err)
		}
		s.unmapped = true
	}
	if err := hlsys.MemFree(d.b, s.handle); err != nil {
		// Kept (unmapped) for a later release to retry the FREE: the
		// driver holds the page until then.
		return d.ioErr(fmt.Sprintf("%s: free its slab %#x", op, s.va), "", err)
	}
	d.slabs.list = slices.DeleteFunc(d.slabs.list, func(x *slab) bool { return x == s })
	return nil
}

// closeSlabs releases the slabs left empty after Close released every
// buffer (those a refused UNMAP kept); with the context gone (running) it
// only forgets them.
func (d *Device) closeSlabs() []error {
	sl := &d.slabs
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if d.gone {
		sl.list = nil
		return nil
	}
	var errs []error
	for _, s := range slices.Clone(sl.list) {
		if s.live > 0 {
			continue // a buffer Close could not free holds it
		}
		if err := d.releaseSlabLocked("close "+d.Name(), s); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// SlabCount is the number of shared allocations device memory is carved
// from (see AllocDevice).
func (d *Device) SlabCount() int {
	d.slabs.mu.Lock()
	defer d.slabs.mu.Unlock()
	return len(d.slabs.list)
}
