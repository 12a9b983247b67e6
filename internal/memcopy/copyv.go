package memcopy

import (
	"sort"
	"sync"
	"sync/atomic"
)

// CopyV copies a list of pieces, src[i] to dst[i] (min(len(dst[i]),
// len(src[i])) bytes each), as one copy: the kernel is chosen by the
// total size (a thousand 64 KiB pieces of a 64 MiB transfer are stored
// non-temporally as a contiguous 64 MiB copy would be, not each kept in
// cache as a lone 64 KiB copy), and from ParallelMin bytes in all the
// pieces are split over the workers by bytes (chunks that may cross piece
// boundaries). Pieces must not overlap one another's destinations; a
// piece whose own source and destination overlap is copied as copy()
// does (memmove), and such a list is not split. It returns the number of bytes copied. It panics if
// len(dsts) != len(srcs).
func (c *Copier) CopyV(dsts, srcs [][]byte) int {
	if len(dsts) != len(srcs) {
		panic("memcopy: CopyV with unequal piece counts")
	}
	total := 0
	for i := range dsts {
		total += min(len(dsts[i]), len(srcs[i]))
	}
	if total == 0 {
		return 0
	}
	if c == nil {
		for i := range dsts {
			copy(dsts[i], srcs[i])
		}
		return total
	}
	k := c.p.Kernel(total)
	parts := c.parts(total)
	if parts < 2 || anyOverlaps(dsts, srcs) {
		for i := range dsts {
			c.runPiece(k, dsts[i], srcs[i])
		}
		return total
	}
	splitV(c, k, dsts, srcs, total, parts)
	return total
}

// runPiece copies one piece with k (copy() for an overlapping one).
func (c *Copier) runPiece(k Kernel, dst, src []byte) {
	n := min(len(dst), len(src))
	if n == 0 {
		return
	}
	dst, src = dst[:n], src[:n]
	if k == Go || overlaps(dst, src) {
		copy(dst, src)
		return
	}
	run(k, dst, src)
}

// anyOverlaps reports whether a piece's source and destination overlap
// (such a list is copied piece by piece: a memmove cannot be split).
func anyOverlaps(dsts, srcs [][]byte) bool {
	for i := range dsts {
		n := min(len(dsts[i]), len(srcs[i]))
		if n > 0 && overlaps(dsts[i][:n], srcs[i][:n]) {
			return true
		}
	}
	return false
}

// splitV is split over a list of pieces: the pieces are laid end to end
// and cut into chunks of bytes, taken in turn by the caller and by
// parts-1 helper goroutines (see split for why plain goroutines, and why
// a helper finding no idle core leaves the caller no worse off).
func splitV(c *Copier, k Kernel, dsts, srcs [][]byte, total, parts int) {
	// ends[i] is the offset, in the concatenation, of the end of piece i.
	ends := make([]int, len(dsts))
	off := 0
	for i := range dsts {
		off += min(len(dsts[i]), len(srcs[i]))
		ends[i] = off
	}
	chunk := min(max(total/(parts*8), 512<<10), 4<<20) &^ 4095
	var next atomic.Int64
	work := func() {
		for {
			start := int(next.Add(int64(chunk))) - chunk
			if start >= total {
				return
			}
			end := min(start+chunk, total)
			// The first piece ending after start.
			i := sort.SearchInts(ends, start+1)
			for pos := start; pos < end; i++ {
				pstart := ends[i] - min(len(dsts[i]), len(srcs[i]))
				lo, hi := pos-pstart, min(end, ends[i])-pstart
				if hi > lo {
					c.runPiece(k, dsts[i][lo:hi], srcs[i][lo:hi])
				}
				pos = pstart + hi
			}
		}
	}
	var wg sync.WaitGroup
	for range parts - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}
