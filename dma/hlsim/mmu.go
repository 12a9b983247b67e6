package hlsim

import (
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
)

const (
	pageSize     = 4096    // host page and PMMU page
	hugePageSize = 2 << 20 // PMMU huge page
)

// The emulated device address map. Device ranges are chosen so that no
// valid x86-64 user-space pointer falls into an MMU range (a raw host
// pointer handed to the device faults instead of working by accident).
const (
	// Gaudi2: the DRAM virtual range of the device MMU (DMMU) starts at
	// dram_base_address; host mappings (PMMU) use the range the Gaudi2
	// driver uses, 4 KiB pages in the lower half, 2 MiB pages above.
	g2DMMUBase     = 0x1001_0000_0000_0000
	g2DMMUSpan     = 1 << 44
	g2PMMUBase     = 0xFFF0_0000_0000_0000
	g2PMMUHugeBase = 0xFFF0_8000_0000_0000
	g2PMMUSpan     = 1 << 47

	// Gaudi1: physical DRAM from dram_base_address (the driver keeps the
	// first 512 MiB for itself), host mappings above 2^48 (device
	// addresses are 56 bits wide in LIN_DMA dst).
	g1DRAMBase     = 0x6_2000_0000
	g1PMMUBase     = 1 << 48
	g1PMMUHugeBase = 1<<48 + 1<<47
	g1PMMUSpan     = 1 << 47

	// SRAM, physical on both models.
	sramBase   = 0x7F_F000_0000
	g1SRAMSize = 24 << 20
	g2SRAMSize = 48 << 20
)

// addrMap is a device's fixed address layout.
type addrMap struct {
	gaudi2             bool   // DRAM behind the device MMU (Gaudi2 and Gaudi3)
	gaudi3             bool   // Gaudi3: direct PDMA mode, no user queue
	dramBase, dramSize uint64 // Gaudi2: DMMU VA range start; Gaudi1: physical
	dramPage           uint64
	dmmuEnd            uint64 // Gaudi2: end of the DMMU VA range
	pmmuBase, pmmuHuge uint64
	pmmuEnd            uint64
	sramBase, sramSize uint64
}

func newAddrMap(cfg Config) addrMap {
	a := addrMap{dramSize: cfg.DRAMSize, dramPage: cfg.DRAMPageSize, sramBase: sramBase}
	switch cfg.Model {
	case ModelGaudi3:
		a.gaudi2, a.gaudi3 = true, true
		a.dramBase, a.dmmuEnd = g3DRAMBase, g3DRAMBase+g2DMMUSpan
		a.pmmuBase, a.pmmuHuge, a.pmmuEnd = g3PMMUBase, g3PMMUHugeBase, g3PMMUHugeBase+g3PMMUSpan
		a.sramSize = g2SRAMSize
		return a
	case ModelGaudi2:
		a.gaudi2 = true
		a.dramBase, a.dmmuEnd = g2DMMUBase, g2DMMUBase+g2DMMUSpan
		a.pmmuBase, a.pmmuHuge, a.pmmuEnd = g2PMMUBase, g2PMMUHugeBase, g2PMMUHugeBase+g2PMMUSpan
		a.sramSize = g2SRAMSize
	default:
		a.dramBase = g1DRAMBase
		a.pmmuBase, a.pmmuHuge, a.pmmuEnd = g1PMMUBase, g1PMMUHugeBase, g1PMMUHugeBase+g1PMMUSpan
		a.sramSize = g1SRAMSize
	}
	return a
}

// cbAddressValid is the parser's check of a user CB address
// (gaudi2_validate_cb_address, gaudi_parse_cb_no_ext_queue): [va, va+n)
// must lie inside the user SRAM, the DRAM (Gaudi1: physical; Gaudi2: the
// DMMU range), or a host MMU range, with n > 0 (hl_mem_area_inside_range
// wants end > start). The Gaudi2 physical DRAM range the driver also
// accepts is not part of the emulated address map.
func (a *addrMap) cbAddressValid(va, n uint64) bool {
	end := va + n
	if end <= va {
		return false
	}
	in := func(lo, hi uint64) bool { return va >= lo && end <= hi }
	switch {
	case in(a.sramBase, a.sramBase+a.sramSize):
		return true
	case a.gaudi2 && in(a.dramBase, a.dmmuEnd):
		return true
	case !a.gaudi2 && in(a.dramBase, a.dramBase+a.dramSize):
		return true
	}
	return in(a.pmmuBase, a.pmmuHuge) || in(a.pmmuHuge, a.pmmuEnd)
}

type mapKind uint8

const (
	mapHost  mapKind = iota + 1 // USERPTR: host memory of this process
	mapDRAM                     // Gaudi2 DRAM allocation
	mapLocal                    // emulator-owned memory (a kernel CB mapped with CB_FLAGS_MAP)
)

// mapping is one translation of a device MMU: device addresses
// [va, va+size) reach the target; [va, va+span) is reserved in the VA
// space (span >= size).
type mapping struct {
	va, size, span uint64
	ret            uint64 // the VA MAP returned (UNMAP needs exactly it)
	kind           mapKind
	host           uint64      // mapHost: host address of va
	mem            []byte      // mapDRAM, mapLocal: memory at va (len >= size)
	alloc          *allocation // mapDRAM
	exported       bool        // a DMA-BUF was exported from this mapping
}

// vaSpace is one VA range of a device MMU with its mappings, sorted and
// non-overlapping: a page table kept as ranges. Lookups are binary
// searches; a DMA range is translated piecewise across mappings.
type vaSpace struct {
	start, end uint64
	align      uint64
	next       uint64 // next-fit cursor: freed VAs are not reused at once
	maps       []*mapping
}

func newVASpace(start, span, align uint64) *vaSpace {
	return &vaSpace{start: start, end: start + span, align: align, next: start}
}

func (s *vaSpace) contains(a uint64) bool { return a >= s.start && a < s.end }

// find returns the mapping that translates a, or nil.
func (s *vaSpace) find(a uint64) *mapping {
	i := sort.Search(len(s.maps), func(i int) bool { return s.maps[i].va+s.maps[i].span > a })
	if i < len(s.maps) && s.maps[i].va <= a && a < s.maps[i].va+s.maps[i].size {
		return s.maps[i]
	}
	return nil
}

// alignUp rounds a up to align, relative to the space's start.
func (s *vaSpace) alignUp(a, align uint64) uint64 {
	off := a - s.start
	return s.start + (off+align-1)/align*align
}

// isFree reports whether [a, a+n) is inside the space and unused.
func (s *vaSpace) isFree(a, n uint64) bool {
	if a < s.start || a+n < a || a+n > s.end {
		return false
	}
	i := sort.Search(len(s.maps), func(i int) bool { return s.maps[i].va+s.maps[i].span > a })
	return i == len(s.maps) || s.maps[i].va >= a+n
}

// alloc reserves n bytes at an address aligned to align (a multiple of
// the space's page), as get_va_block does: a hint is taken when it is
// aligned and the free block holding it extends at least one byte past
// hint+n (the driver compares hint+size with the block's inclusive end);
// otherwise, or without a hint, the emulator picks next-fit from its
// cursor (the driver picks the smallest fitting block: VA placement is
// not modeled). With force, a hint that cannot be honoured fails (ENOMEM,
// as the driver's "no available va block"), and so does hint 0: get_va_block
// fails a forced hint whenever the block it found does not start at the
// hint, which for hint 0 is always.
func (s *vaSpace) alloc(n, hint, align uint64, force bool) (uint64, error) {
	if align < s.align {
		align = s.align
	}
	if force && hint == 0 {
		return 0, unix.ENOMEM
	}
	if hint != 0 {
		if (hint-s.start)%align == 0 && s.isFree(hint, n+1) {
			return hint, nil
		}
		if force {
			return 0, unix.ENOMEM
		}
	}
	if a, ok := s.fit(s.next, s.end, n, align); ok {
		s.next = a + n
		return a, nil
	}
	if a, ok := s.fit(s.start, s.next, n, align); ok {
		s.next = a + n
		return a, nil
	}
	return 0, unix.ENOMEM
}

// fit finds the first free aligned block of n bytes that starts in
// [from, limit).
func (s *vaSpace) fit(from, limit, n, align uint64) (uint64, bool) {
	if from < s.start {
		from = s.start
	}
	a := s.alignUp(from, align)
	i := sort.Search(len(s.maps), func(i int) bool { return s.maps[i].va+s.maps[i].span > a })
	for {
		if a < from || a >= limit || a+n < a || a+n > s.end {
			return 0, false
		}
		if i == len(s.maps) || a+n <= s.maps[i].va {
			return a, true
		}
		a = s.alignUp(s.maps[i].va+s.maps[i].span, align)
		i++
	}
}

func (s *vaSpace) insert(m *mapping) {
	i := sort.Search(len(s.maps), func(i int) bool { return s.maps[i].va >= m.va })
	s.maps = append(s.maps, nil)
	copy(s.maps[i+1:], s.maps[i:])
	s.maps[i] = m
}

func (s *vaSpace) remove(m *mapping) {
	i := sort.Search(len(s.maps), func(i int) bool { return s.maps[i].va >= m.va })
	if i < len(s.maps) && s.maps[i] == m {
		s.maps = append(s.maps[:i], s.maps[i+1:]...)
	}
}

// seg is one contiguous piece of a translated device range: either
// emulator-owned memory (mem) or host memory of this process at host.
type seg struct {
	mem  []byte // len(mem) == n when set
	host uint64
	n    uint64
}

// faultError is an MMU page fault or an access outside every device range.
type faultError struct {
	addr uint64
	why  string
}

func (e *faultError) Error() string {
	return fmt.Sprintf("MMU fault at device address %#x: %s", e.addr, e.why)
}

// translate appends to segs the pieces that device range [addr, addr+n)
// reaches. Every byte must be mapped. The caller holds memMu (read).
func (c *hctx) translate(segs []seg, addr, n uint64) ([]seg, error) {
	if n == 0 {
		return segs, nil
	}
	if addr+n < addr {
		return segs, &faultError{addr, "range wraps around"}
	}
	for n > 0 {
		s, err := c.translateOne(addr, n)
		if err != nil {
			return segs, err
		}
		segs = append(segs, s)
		addr += s.n
		n -= s.n
	}
	return segs, nil
}

func (c *hctx) translateOne(addr, n uint64) (seg, error) {
	a := &c.d.amap
	local := func(mem []byte, off, limit uint64) seg {
		k := min(n, limit-off)
		return seg{mem: mem[off : off+k : off+k], n: k}
	}
	switch {
	case addr >= a.sramBase && addr-a.sramBase < a.sramSize:
		return local(c.d.sram, addr-a.sramBase, a.sramSize), nil
	case !a.gaudi2 && addr >= a.dramBase && addr-a.dramBase < a.dramSize:
		return local(c.d.arena, addr-a.dramBase, a.dramSize), nil
	}
	var space *vaSpace
	switch {
	case c.dmmu != nil && c.dmmu.contains(addr):
		space = c.dmmu
	case c.pmmu.contains(addr):
		space = c.pmmu
	case c.pmmuHuge.contains(addr):
		space = c.pmmuHuge
	default:
		return seg{}, &faultError{addr, "outside every device range"}
	}
	m := space.find(addr)
	if m == nil {
		return seg{}, &faultError{addr, "unmapped"}
	}
	off := addr - m.va
	switch m.kind {
	case mapHost:
		k := min(n, m.size-off)
		return seg{host: m.host + off, n: k}, nil
	default:
		return local(m.mem, off, m.size), nil
	}
}
