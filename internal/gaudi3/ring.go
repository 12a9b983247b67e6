package gaudi3

import "fmt"

// Ring arithmetic of a direct-mode submission queue. MSQ_PI and MSQ_CI are
// free-running 32-bit byte counts; the packet at count c sits at ring
// offset c mod size.

// CheckRingSize reports whether size is a ring size the MSQ_SIZE register
// can describe: a power of two of at least 8 bytes and at most MSQMaxSize.
func CheckRingSize(size uint64) error {
	if size < PIAlign || size > MSQMaxSize || size&(size-1) != 0 {
		return fmt.Errorf("gaudi3: ring size %d is not a power of two in [%d, %d]", size, PIAlign, MSQMaxSize)
	}
	return nil
}

// RingUsed is the number of bytes submitted and not yet consumed.
func RingUsed(pi, ci uint32) uint32 { return pi - ci }

// RingFree is the number of bytes that can be written at pi without
// overwriting packets the engine has not consumed.
func RingFree(pi, ci, size uint32) uint32 { return size - (pi - ci) }

// PadBeforeWrap returns the NOP padding (a multiple of NOPSize) to write at
// pi so that a packet of n bytes does not straddle the end of the ring:
// 0 when it fits before the end. The sources report a PQM defect with
// packets that wrap (docs/gaudi3.md), so gxfer never lets one wrap.
func PadBeforeWrap(pi, size uint32, n int) uint32 {
	off := pi & (size - 1)
	if uint64(off)+uint64(n) <= uint64(size) {
		return 0
	}
	return size - off
}
