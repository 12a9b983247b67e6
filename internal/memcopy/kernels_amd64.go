package memcopy

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func copyAVX2(dst, src unsafe.Pointer, n uintptr)

//go:noescape
func copyNT(dst, src unsafe.Pointer, n uintptr)

//go:noescape
func copyNTPages(dst, src unsafe.Pointer, n uintptr)

//go:noescape
func copyRepMovsb(dst, src unsafe.Pointer, n uintptr)

func cpuid(leaf, sub uint32) (a, b, c, d uint32)

// detectCPU reads the vendor (CPUID leaf 0) and the copy-related features
// (x/sys/cpu; FSRM, which it does not report, from CPUID leaf 7 EDX bit 4).
func detectCPU() CPU {
	maxLeaf, b, c, d := cpuid(0, 0)
	var v [12]byte
	binary.LittleEndian.PutUint32(v[0:], b)
	binary.LittleEndian.PutUint32(v[4:], d)
	binary.LittleEndian.PutUint32(v[8:], c)
	fsrm := false
	if maxLeaf >= 7 {
		_, _, _, d7 := cpuid(7, 0)
		fsrm = d7&(1<<4) != 0
	}
	family := 0
	if maxLeaf >= 1 {
		a1, _, _, _ := cpuid(1, 0)
		family = displayFamily(a1)
	}
	x := CPU{Vendor: string(v[:]), Family: family, AVX2: cpu.X86.HasAVX2, ERMS: cpu.X86.HasERMS, FSRM: fsrm}
	if maxExt, _, _, _ := cpuid(0x8000_0000, 0); x.Vendor == "AuthenticAMD" && maxExt >= 0x8000_0005 {
		_, _, ecx, _ := cpuid(0x8000_0005, 0) // AMD CPUID Specification: Fn8000_0005_ECX L1DcSize
		x.L1D = int(ecx>>24) << 10
	}
	return x
}

// kernels available on this CPU.
func (c CPU) has(k Kernel) bool {
	switch k {
	case Go:
		return true
	case AVX2, NonTemporal, NonTemporalPages:
		return c.AVX2
	case RepMovsb, RepMovsbPieces:
		return true // REP MOVSB is always there; ERMS only makes it fast
	}
	return false
}

// run copies len(src) bytes (len(dst) >= len(src), no overlap) with k,
// which the CPU has.
func run(k Kernel, dst, src []byte) {
	n := len(src)
	if n == 0 {
		return
	}
	d, s := unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src))
	switch k {
	case AVX2:
		copyAVX2(d, s, uintptr(n))
	case NonTemporal:
		copyNT(d, s, uintptr(n))
	case NonTemporalPages:
		copyNTPages(d, s, uintptr(n))
	case RepMovsb:
		copyRepMovsb(d, s, uintptr(n))
	case RepMovsbPieces:
		for off := 0; off < n; off += RepPiece {
			copyRepMovsb(unsafe.Add(d, off), unsafe.Add(s, off), uintptr(min(RepPiece, n-off)))
		}
	default:
		copy(dst, src)
	}
}
