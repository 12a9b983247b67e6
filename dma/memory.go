package dma

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// gaudi1Align is the alignment and size granularity of Gaudi1 DRAM
// allocations. 4 KiB is the host PAGE_SIZE, which the DMA-BUF exporter
// requires of export addresses; the DMA engines need far less. (Gaudi1's
// dram_page_size, 2 MiB, only matters to the driver's own MMU-less
// accounting, which takes any size.)
const gaudi1Align = 4096

func alignUp(v, a uint64) (uint64, bool) {
	if a == 0 {
		return v, true
	}
	r := v % a
	if r == 0 {
		return v, true
	}
	if v > math.MaxUint64-(a-r) {
		return 0, false
	}
	return v + a - r, true
}

// DeviceMem is an allocation of device DRAM.
type DeviceMem struct {
	d         *Device
	id        uint64
	addr      uint64
	size      uint64
	allocSize uint64
	handle    uint64

	slab *slab // the shared allocation it is carved from (slab.go), or nil

	// guarded by d.mu
	exports  int
	exported bool // ever exported: its range in a slab is not reused
	freed    bool
}

// Addr is the address to put in packets: the device VA returned by MAP
// on Gaudi2/3, the physical DRAM address on Gaudi1.
func (m *DeviceMem) Addr() uint64 { return m.addr }

// Size is the size that was requested.
func (m *DeviceMem) Size() uint64 { return m.size }

// AllocSize is the size actually allocated: rounded up to the host page
// for memory carved from a shared allocation (see AllocDevice), else to the
// allocation page on Gaudi2/3 and to 4 KiB on Gaudi1.
func (m *DeviceMem) AllocSize() uint64 { return m.allocSize }

// Handle is the ALLOC handle (Gaudi2/3; that of the shared allocation
// for memory carved from one); 0 on Gaudi1.
func (m *DeviceMem) Handle() uint64 { return m.handle }

// Device returns the device the memory belongs to.
func (m *DeviceMem) Device() *Device { return m.d }

// AllocDevice allocates size bytes of device DRAM.
//
// Gaudi2/3: MEMORY ALLOC (size rounded up to the allocation page size from
// HW_IP_INFO) then MAP, which gives the device VA. Where the driver's
// DMA-BUF export honours its offset (kernels 6.7+), a size below the
// allocation page is instead carved, host-page aligned, from a shared
// allocation of one page (slab.go: Gaudi2's page is 768 MiB). Gaudi1 has no MMU in
// front of DRAM: the range is carved from [dram_base_address,
// +dram_size) by a first-fit allocator with 4 KiB alignment, and ALLOC /
// FREE are issued for the driver's accounting only.
//
// Size 0 gives ErrInvalid; running out of memory an error wrapping
// ErrNoMemory.
func (d *Device) AllocDevice(size uint64) (*DeviceMem, error) {
	op := fmt.Sprintf("alloc %d bytes of device memory on %s", size, d.Name())
	if size == 0 {
		return nil, newErr(op, ErrInvalid, "size 0", nil)
	}
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.leave()

	m := &DeviceMem{d: d, size: size}
	if d.subAllocates(size) {
		if err := d.allocFromSlab(op, m); err != nil {
			return nil, err
		}
	} else if d.model.hasDeviceMMU() {
		n, ok := alignUp(size, d.allocPage)
		if !ok {
			return nil, newErr(op, ErrNoMemory, "size too large", nil)
		}
		h, err := hlsys.MemAlloc(d.b, n, 0, 0)
		if errors.Is(err, unix.ENOMEM) && d.releaseEmptySlabs(op) {
			// An empty slab kept after a refused UNMAP held the page.
			h, err = hlsys.MemAlloc(d.b, n, 0, 0)
		}
		if err != nil {
			return nil, d.ioErr(op, "", err)
		}
		va, err := hlsys.MemMapDevice(d.b, h, 0, 0)
		if err != nil {
			if ferr := hlsys.MemFree(d.b, h); ferr != nil {
				d.log.Warn().Err(ferr).Uint64("handle", h).Msg("free after failed map")
			}
			return nil, d.ioErr(op, "map", err)
		}
		m.addr, m.allocSize, m.handle = va, n, h
	} else {
		n, ok := alignUp(size, gaudi1Align)
		if !ok {
			return nil, newErr(op, ErrNoMemory, "size too large", nil)
		}
		addr, ok := d.dram.alloc(n)
		if !ok {
			return nil, newErr(op, ErrNoMemory, fmt.Sprintf(
				"no free range of %d bytes in DRAM [%#x, %#x)", n, d.dram.base, d.dram.limit), nil)
		}
		if _, err := hlsys.MemAlloc(d.b, n, 0, 0); err != nil { // accounting only
			d.dram.free(addr, n)
			return nil, d.ioErr(op, "", err)
		}
		m.addr, m.allocSize = addr, n
	}
	m.id = d.track(m)
	return m, nil
}

// Free releases the memory: UNMAP then FREE on Gaudi2/3, accounting FREE
// and return of the range on Gaudi1. It refuses with an error wrapping
// ErrBusy while a DMA-BUF export of the memory is open. When the driver
// refuses the UNMAP (an importer still holds a closed export's DMA-BUF:
// EINVAL) the memory stays allocated and Free may be called again. A
// second Free after one that succeeded (or Free after Device.Close)
// returns nil.
//
// Free does not wait for the command submissions that use the memory:
// the caller must have waited for them. Memory carved from a slab (see
// the package doc) goes back to the slab at once and the next allocation
// may get the same range, so a copy still running into it lands in that
// allocation; a whole allocation is unmapped, and such a copy takes an
// MMU fault. gxfer's engine holds a reference on a buffer for each copy
// in flight and frees it only after the last.
func (m *DeviceMem) Free() error {
	if m == nil {
		return nil
	}
	d := m.d
	d.gate.RLock()
	defer d.gate.RUnlock()
	if d.closed {
		return nil // Close released it
	}
	return m.release()
}

func (m *DeviceMem) release() error {
	d := m.d
	op := fmt.Sprintf("free device memory %#x (%d bytes) on %s", m.addr, m.allocSize, d.Name())
	d.mu.Lock()
	if m.freed {
		d.mu.Unlock()
		return nil
	}
	if m.exports > 0 {
		n := m.exports
		d.mu.Unlock()
		return newErr(op, ErrBusy, fmt.Sprintf("%d DMA-BUF export(s) still open; close them first", n), nil)
	}
	m.freed = true
	exported := m.exported
	delete(d.live, m.id)
	d.dropSpanLocked(m.id)
	d.mu.Unlock()
	if m.slab != nil {
		// The buffer is free whatever the slab's own release gives: a
		// refused UNMAP keeps the slab for a later release or Close.
		if err := d.releaseFromSlab(op, m, exported); err != nil {
			d.log.Debug().Err(err).Msg("slab kept")
		}
		return nil
	}
	if d.gone {
		return nil // the context's teardown freed it
	}

	if !d.model.hasDeviceMMU() {
		err := hlsys.MemFree(d.b, m.allocSize) // Gaudi1: FREE takes the size
		d.dram.free(m.addr, m.allocSize)
		return d.ioErr(op, "", err)
	}
	if err := hlsys.MemUnmap(d.b, m.addr); err != nil {
		// The driver kept the mapping: an importer still holds a
		// DMA-BUF of it (unmap_device_va in memory.c refuses while the
		// export count is not 0: "memory is exported", EINVAL), or the
		// device is not operational (hl_mem_ioctl, EBUSY). FREE of a
		// mapped handle fails too, so the memory stays live for a later
		// Free to retry; Close leaves it to the context's teardown.
		d.relive(m, &m.freed, addrSpan{lo: m.addr, n: m.allocSize, kind: AddrDevice, id: m.id})
		return d.ioErr(op+": unmap", "", err)
	}
	return d.ioErr(op, "", hlsys.MemFree(d.b, m.handle))
}

// HostMapping is host memory pinned and mapped into the device MMU.
type HostMapping struct {
	d    *Device
	id   uint64
	p    unsafe.Pointer // keeps Go memory alive while mapped
	va   uint64
	size uint64

	done bool // guarded by d.mu
}

// DeviceAddr is the device VA of the host memory, including the in-page
// offset of the host address. Put it in packets.
func (h *HostMapping) DeviceAddr() uint64 { return h.va }

// HostAddr is the host address that was mapped.
func (h *HostMapping) HostAddr() uintptr { return uintptr(h.p) }

// Size is the mapped size in bytes.
func (h *HostMapping) Size() uint64 { return h.size }

// MapHost pins size bytes of host memory at p and maps them into the
// device MMU (MEMORY MAP with USERPTR). The memory must be writable and
// must stay valid until Unmap; memory from AllocHostPages (outside the Go
// heap) is the right kind. p need not be page aligned: the returned VA
// carries the in-page offset.
func (d *Device) MapHost(p unsafe.Pointer, size uint64) (*HostMapping, error) {
	op := fmt.Sprintf("map %d bytes of host memory at %p on %s", size, p, d.Name())
	if p == nil || size == 0 {
		return nil, newErr(op, ErrInvalid, "nil pointer or size 0", nil)
	}
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.leave()
	va, err := hlsys.MemMapHost(d.b, p, size, 0, 0)
	if err != nil {
		return nil, d.ioErr(op, "", err)
	}
	h := &HostMapping{d: d, p: p, va: va, size: size}
	h.id = d.track(h)
	return h, nil
}

// MapHostBytes is MapHost for a byte slice.
func (d *Device) MapHostBytes(b []byte) (*HostMapping, error) {
	if len(b) == 0 {
		return nil, newErr("map host memory on "+d.Name(), ErrInvalid, "empty slice", nil)
	}
	return d.MapHost(unsafe.Pointer(unsafe.SliceData(b)), uint64(len(b)))
}

// Unmap unmaps and unpins the memory (MEMORY UNMAP with the VA that MAP
// returned). When the driver refuses the UNMAP (the device is not
// operational: EBUSY) the memory stays mapped and Unmap may be called
// again. A second Unmap after one that succeeded (or Unmap after
// Device.Close) returns nil.
func (h *HostMapping) Unmap() error {
	if h == nil {
		return nil
	}
	d := h.d
	d.gate.RLock()
	defer d.gate.RUnlock()
	if d.closed {
		return nil
	}
	return h.release()
}

func (h *HostMapping) release() error {
	d := h.d
	d.mu.Lock()
	if h.done {
		d.mu.Unlock()
		return nil
	}
	h.done = true
	delete(d.live, h.id)
	d.dropSpanLocked(h.id)
	d.mu.Unlock()
	if d.gone {
		return nil // the context's teardown unmapped and unpinned it
	}
	op := fmt.Sprintf("unmap host memory %#x on %s", h.va, d.Name())
	if err := hlsys.MemUnmap(d.b, h.va); err != nil {
		// The driver kept the mapping and its pin (hl_mem_ioctl: EBUSY
		// while the device is not operational): it stays live for a
		// later Unmap to retry; Close leaves it to the context's
		// teardown.
		d.relive(h, &h.done, addrSpan{lo: h.va, n: h.size, kind: AddrHost, id: h.id})
		return d.ioErr(op, "", err)
	}
	return nil
}

// relive puts r, whose release the driver refused, back among the live
// resources with its span (released, r's flag, cleared) for a later
// release to retry, unless Close has run: the context's teardown then
// frees it.
func (d *Device) relive(r resource, released *bool, span addrSpan) {
	if d.closed {
		return
	}
	d.mu.Lock()
	*released = false
	d.live[span.id] = r
	d.addSpanLocked(span)
	d.mu.Unlock()
}

// AllocHostPages returns size bytes of page-aligned, zeroed anonymous
// memory outside the Go heap, suitable for MapHost (pinned DMA buffers,
// user command buffers). Release it with FreeHostPages, after unmapping it
// from every device.
func AllocHostPages(size uint64) ([]byte, error) {
	if size == 0 {
		return nil, newErr("alloc host pages", ErrInvalid, "size 0", nil)
	}
	n, ok := alignUp(size, uint64(os.Getpagesize()))
	if !ok || n > math.MaxInt {
		return nil, newErr("alloc host pages", ErrInvalid, fmt.Sprintf("size %d too large", size), nil)
	}
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, newErr(fmt.Sprintf("alloc %d bytes of host pages", n), errnoKind(err), "", err)
	}
	return b[:size], nil
}

// FreeHostPages unmaps memory returned by AllocHostPages. Pass the slice
// AllocHostPages returned (its capacity covers the whole mapping).
func FreeHostPages(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	if err := unix.Munmap(b[:cap(b)]); err != nil {
		return newErr("free host pages", ErrInvalid, "not a slice returned by AllocHostPages", err)
	}
	return nil
}

// AddrKind says what memory an address in a packet refers to.
type AddrKind int

const (
	// AddrUnknown: the address is not in any range this Device knows.
	AddrUnknown AddrKind = iota
	// AddrHost: host memory mapped with MapHost.
	AddrHost
	// AddrDevice: device memory (an AllocDevice range; on Gaudi1 also any
	// address in the user DRAM or SRAM range).
	AddrDevice
)

func (k AddrKind) String() string {
	switch k {
	case AddrHost:
		return "host"
	case AddrDevice:
		return "device"
	}
	return "unknown"
}

// AddrKind classifies a device-side address by the live allocations and
// host mappings of d (a linear scan). Host VAs and device VAs are never
// told apart by their value alone.
func (d *Device) AddrKind(addr uint64) AddrKind {
	d.mu.Lock()
	// The last span starting at or below addr: spans do not overlap (each
	// is an allocation or a mapping in the device's address space).
	i, _ := slices.BinarySearchFunc(d.spans, addr, func(s addrSpan, a uint64) int { return cmp.Compare(s.lo, a) })
	if i < len(d.spans) && d.spans[i].lo == addr {
		i++
	}
	if i > 0 && addr-d.spans[i-1].lo < d.spans[i-1].n {
		k := d.spans[i-1].kind
		d.mu.Unlock()
		return k
	}
	d.mu.Unlock()
	if d.model == ModelGaudi1 {
		in := func(base, size uint64) bool { return addr >= base && addr-base < size }
		if in(d.info.DramBaseAddress, d.info.DramSize) || in(d.info.SramBaseAddress, uint64(d.info.SramSize)) {
			return AddrDevice
		}
	}
	return AddrUnknown
}

// addrSpan is the device-address range of a live DeviceMem or HostMapping.
type addrSpan struct {
	lo, n uint64
	kind  AddrKind
	id    uint64 // its resource's
}

// addSpanLocked inserts s in address order (d.mu held).
func (d *Device) addSpanLocked(s addrSpan) {
	i, _ := slices.BinarySearchFunc(d.spans, s.lo, func(x addrSpan, lo uint64) int { return cmp.Compare(x.lo, lo) })
	d.spans = slices.Insert(d.spans, i, s)
}

// dropSpanLocked removes the span of resource id (d.mu held).
func (d *Device) dropSpanLocked(id uint64) {
	d.spans = slices.DeleteFunc(d.spans, func(s addrSpan) bool { return s.id == id })
}

// rangeAlloc is a first-fit allocator over [base, limit) used for Gaudi1's
// physical DRAM. All sizes and addresses are multiples of align.
type rangeAlloc struct {
	mu    sync.Mutex
	align uint64
	base  uint64
	limit uint64
	spans []extent // free spans, sorted by start, never adjacent or overlapping
}

type extent struct{ start, end uint64 }

func newRangeAlloc(base, size, align uint64) *rangeAlloc {
	a := &rangeAlloc{align: align}
	start, ok := alignUp(base, align)
	end := base + size
	if end < base {
		end = math.MaxUint64
	}
	end -= end % align
	if ok && start < end {
		a.base, a.limit = start, end
		a.spans = []extent{{start, end}}
	}
	return a
}

// alloc returns the lowest free address of a range of n bytes.
func (a *rangeAlloc) alloc(n uint64) (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.spans {
		e := &a.spans[i]
		if e.end-e.start < n {
			continue
		}
		addr := e.start
		e.start += n
		if e.start == e.end {
			a.spans = append(a.spans[:i], a.spans[i+1:]...)
		}
		return addr, true
	}
	return 0, false
}

// free returns [addr, addr+n) and merges it with its neighbours.
func (a *rangeAlloc) free(addr, n uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	end := addr + n
	i := 0
	for i < len(a.spans) && a.spans[i].start < addr {
		i++
	}
	// Merge with the previous and/or next extent.
	prev := i > 0 && a.spans[i-1].end == addr
	next := i < len(a.spans) && a.spans[i].start == end
	switch {
	case prev && next:
		a.spans[i-1].end = a.spans[i].end
		a.spans = append(a.spans[:i], a.spans[i+1:]...)
	case prev:
		a.spans[i-1].end = end
	case next:
		a.spans[i].start = addr
	default:
		a.spans = append(a.spans, extent{})
		copy(a.spans[i+1:], a.spans[i:])
		a.spans[i] = extent{addr, end}
	}
}

// freeBytes is the total free size.
func (a *rangeAlloc) freeBytes() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n uint64
	for _, e := range a.spans {
		n += e.end - e.start
	}
	return n
}
