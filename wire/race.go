//go:build race

package wire

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// raceWritten tells the race detector that a system call wrote the first
// n bytes of the buffers v names (as golang.org/x/sys/unix.Readv does).
func raceWritten(v []unix.Iovec, n int) {
	for i := 0; n > 0 && i < len(v); i++ {
		m := min(int(v[i].Len), n)
		n -= m
		runtime.RaceWriteRange(unsafe.Pointer(v[i].Base), m)
	}
}
