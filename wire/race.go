//go:build race

package wire

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioSync orders, for the race detector, what a stream's writer did
// before it wrote bytes and what its peer's reader does after it read
// them: the syscall package does so for read(2) and write(2), but a
// writev through the net package and this package's readv tell the
// detector nothing, and a receiver that landed a Put's bytes looked
// unordered with the caller that had written the destination before it
// sent the Put (TestRaceStreamOrder). One variable for all streams, as
// the syscall package's: it orders more than the kernel does, never less.
var ioSync byte

// raceWritten tells the race detector that a system call wrote the first
// n bytes of the buffers v names (as golang.org/x/sys/unix.Readv does).
func raceWritten(v []unix.Iovec, n int) {
	for i := 0; n > 0 && i < len(v); i++ {
		m := min(int(v[i].Len), n)
		n -= m
		runtime.RaceWriteRange(unsafe.Pointer(v[i].Base), m)
	}
}

// raceSending tells the race detector that a write of v is about to read
// its bytes, and releases what this goroutine did before it to the
// reads that take them (raceReceived).
func raceSending(v [][]byte) {
	for _, b := range v {
		if len(b) > 0 {
			runtime.RaceReadRange(unsafe.Pointer(&b[0]), len(b))
		}
	}
	runtime.RaceReleaseMerge(unsafe.Pointer(&ioSync))
}

// raceReceived orders what this goroutine does next after the writes
// whose bytes it read (raceSending).
func raceReceived() { runtime.RaceAcquire(unsafe.Pointer(&ioSync)) }
