package dma

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// borrowedFD is the hlsys.Backend of a compute fd lent by the runtime:
// ioctls go to the fd, and Close does nothing (the fd is the runtime's).
// Mmap is refused: gxfer maps no kernel CB on a borrowed device.
type borrowedFD struct {
	fd   int
	node string // /dev/accel/accelN or /dev/hlN ("" when err is set)
	err  error  // why the fd is not a habanalabs compute node
}

// Ioctl issues req on the fd, again if a signal interrupts it, but for
// WAIT_CS (hlsys.Restartable).
func (b *borrowedFD) Ioctl(req uintptr, arg unsafe.Pointer) error {
	return hlsys.IoctlFD(b.fd, req, arg)
}

func (b *borrowedFD) Mmap(int64, int) ([]byte, error) { return nil, unix.EPERM }
func (b *borrowedFD) Munmap([]byte) error             { return unix.EINVAL }

// Close leaves the fd open: it is the runtime's.
func (b *borrowedFD) Close() error { return nil }

func (b *borrowedFD) Numbering() hlsys.Numbering { return hlsys.NumberingForNode(b.node) }

func (b *borrowedFD) Name() string {
	if b.node == "" {
		return "borrowed fd"
	}
	return b.node
}

func (b *borrowedFD) Emulated() bool { return false }
