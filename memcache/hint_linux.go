package memcache

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// adviseHuge asks the kernel to back [p, p+n) with transparent huge pages:
// MADV_HUGEPAGE makes the first touch of each still unbacked huge page
// allocate a huge one (the default THP mode, "madvise", needs it), and
// MADV_COLLAPSE (Linux 6.1) turns pages the Go heap had already backed into
// huge ones now. Both are hints: when THP is disabled, unsupported or
// memory is too fragmented, the table keeps its small pages and only its hit
// cost changes. The range is part of a live Go allocation, which neither
// call changes the contents of.
func adviseHuge(p unsafe.Pointer, n uintptr) {
	b := unsafe.Slice((*byte)(p), n)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	_ = unix.Madvise(b, unix.MADV_COLLAPSE)
}
