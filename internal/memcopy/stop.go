package memcopy

import (
	"unsafe"
)

// CopyStop is Copy for a copy that may be given up part way (a deadline, a
// canceled context): a copy of more than two chunks (chunkSize: from 512
// KiB to 4 MiB) is copied chunk by chunk, split over the workers as Copy
// does from ParallelMin bytes, and stop is called after each chunk (from
// any of the copying goroutines: it must be safe for concurrent use);
// once it returns true no further chunk starts. Smaller copies are Copy's,
// stop never called. It returns the bytes copied, min(len(dst), len(src))
// unless it stopped; the content of the rest of dst is then undefined
// (the chunks are not copied in order). Overlapping ranges are copied as
// copy() does (memmove), chunk by chunk in the direction that reads every
// source byte before it is overwritten, on one goroutine.
func (c *Copier) CopyStop(dst, src []byte, stop func() bool) int {
	n := min(len(dst), len(src))
	if c == nil || stop == nil || !Pieces(n) {
		return c.Copy(dst, src)
	}
	dst, src = dst[:n], src[:n]
	if overlaps(dst, src) {
		return copyStopOverlap(dst, src, chunkSize(n, 1), stop)
	}
	k := c.p.Kernel(n)
	return split(k, dst, src, c.parts(n), stop)
}

// Pieces reports whether CopyStop copies n bytes in pieces, calling stop
// between them (more than two chunks: over 1 MiB).
func Pieces(n int) bool { return n > 2*chunkSize(n, 1) }

// copyStopOverlap copies overlapping dst and src (equally long) chunk by
// chunk with copy(): from the end when dst is above src (a chunk's writes
// then land only on source bytes already copied), else from the start.
func copyStopOverlap(dst, src []byte, chunk int, stop func() bool) int {
	n := len(dst)
	backward := uintptr(unsafe.Pointer(unsafe.SliceData(dst))) > uintptr(unsafe.Pointer(unsafe.SliceData(src)))
	for done := 0; done < n; {
		m := min(chunk, n-done)
		if backward {
			copy(dst[n-done-m:n-done], src[n-done-m:n-done])
		} else {
			copy(dst[done:done+m], src[done:done+m])
		}
		done += m
		if done < n && stop() {
			return done
		}
	}
	return n
}
