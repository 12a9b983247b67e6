package dma

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/synapse"
)

// borrowedFD is the hlsys.Backend of a compute fd lent by the runtime:
// ioctls go to the fd, and Close does nothing (the fd is the runtime's).
// Mmap is refused: gxfer maps no kernel CB on a borrowed device.
type borrowedFD struct {
	fd   int
	node string // /dev/accel/accelN or /dev/hlN ("" when err is set)
	rdev uint64 // the node's device number (0: not recorded)
	err  error  // why the fd is not a habanalabs compute node
}

// newBorrowedFD checks fd (synapse.CheckNode) and records what it names.
func newBorrowedFD(fd int) *borrowedFD {
	b := &borrowedFD{fd: fd}
	b.node, b.err = synapse.CheckNode(fd)
	var st unix.Stat_t
	if b.err == nil && unix.Fstat(fd, &st) == nil {
		b.rdev = st.Rdev
	}
	return b
}

// current reports whether the fd still names the node BorrowFD found:
// the fd is the runtime's, which may close it, and the number may then
// name another file. Checked before every ioctl, so that none goes to
// that file (a reopen of the same node is not told apart).
func (b *borrowedFD) current() error {
	if b.err != nil {
		return newErr("borrowed fd", ErrInvalid, "not a habanalabs compute node", b.err)
	}
	node, err := synapse.CheckNode(b.fd)
	var st unix.Stat_t
	if err == nil {
		err = unix.Fstat(b.fd, &st)
	}
	if err != nil || node != b.node || b.rdev != 0 && st.Rdev != b.rdev {
		return newErr("borrowed fd", ErrInvalid, fmt.Sprintf("fd %d no longer names %s (closed by its owner, or reused)", b.fd, b.node), err)
	}
	return nil
}

// Ioctl issues req on the fd, again if a signal interrupts it, but for
// WAIT_CS (hlsys.Restartable), once current says the fd still names the
// node it was lent as.
func (b *borrowedFD) Ioctl(req uintptr, arg unsafe.Pointer) error {
	if err := b.current(); err != nil {
		return err
	}
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
