//go:build race

// Package racesync tells the race detector what a message over a socket
// orders: what its sender did before sending happened before what its
// receiver does after receiving it. The syscall package does so for
// read(2) and write(2) (its ioSync), but the system calls gxfer's
// transports send and receive with (writev through the net package,
// readv, sendmsg, recvmsg) tell the detector nothing, and a receiver
// acting on a message looked unordered with what its sender did first
// (TestQueuedPutAbandoned in internal/datapath/tcp failed so in CI).
// Written does for a raw readv what x/sys/unix.Readv does: it tells the
// detector which bytes the kernel wrote. In builds without the race
// detector every function is empty.
//
// One variable orders every socket of the process, as the syscall
// package's does: it orders more than the kernel does, never less.
package racesync

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

var ioSync byte

// Sending tells the detector that a send of v is about to read its
// bytes, and releases what this goroutine did so far to the receives
// that follow (Received).
func Sending(v [][]byte) {
	for _, b := range v {
		if len(b) > 0 {
			runtime.RaceReadRange(unsafe.Pointer(&b[0]), len(b))
		}
	}
	runtime.RaceReleaseMerge(unsafe.Pointer(&ioSync))
}

// Received orders what this goroutine does next after the sends whose
// bytes it received (Sending).
func Received() { runtime.RaceAcquire(unsafe.Pointer(&ioSync)) }

// Written tells the detector that a system call wrote the first n bytes
// of the buffers v names (as golang.org/x/sys/unix.Readv does).
func Written(v []unix.Iovec, n int) {
	for i := 0; i < len(v) && n > 0; i++ {
		m := min(n, int(v[i].Len))
		n -= m
		runtime.RaceWriteRange(unsafe.Pointer(v[i].Base), m)
	}
}
