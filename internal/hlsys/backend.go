package hlsys

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
)

// Numbering says which ioctl request numbers a node takes.
type Numbering uint8

const (
	// Legacy is the 'H' numbering of /dev/hlN nodes (kernels up to 6.6).
	Legacy Numbering = iota + 1
	// Accel is the DRM accel numbering of /dev/accel/accelN nodes: the
	// driver registered its compute device as a DRM accel device and moved
	// its ioctls into the DRM driver-specific range in kernel 6.7.
	Accel
)

func (n Numbering) String() string {
	switch n {
	case Legacy:
		return "legacy 'H' (/dev/hlN)"
	case Accel:
		return "DRM accel (/dev/accel/accelN)"
	}
	return fmt.Sprintf("numbering(%d)", uint8(n))
}

// NumberingForNode picks the numbering from a device node path.
func NumberingForNode(path string) Numbering {
	if strings.Contains(path, "/accel/") || strings.HasPrefix(path, "accel") {
		return Accel
	}
	return Legacy
}

// Backend is the seam between the driver binding and a device: the real
// device node or the emulator. Implementations must be safe for concurrent
// use; Close must be idempotent.
type Backend interface {
	// Ioctl performs one request on the device. arg points to the request's
	// argument struct, which the device reads and writes in place. A
	// WAIT_CS a signal interrupts fails with EINTR, for the caller to
	// issue again for the time left (Restartable).
	Ioctl(req uintptr, arg unsafe.Pointer) error
	// Mmap maps length bytes of the device file at offset (kernel CBs).
	Mmap(offset int64, length int) ([]byte, error)
	// Munmap undoes Mmap, of the whole mapping or of part of it as
	// munmap(2) takes it (a page-aligned start, the length rounded up to
	// pages; the driver keeps the CB or block until every part is gone).
	// b must start on a page and not be empty (EINVAL otherwise), as
	// munmap(2) requires; as there, b may hold parts of several mappings
	// and pages that are none of the device's: what of each mapping lies
	// in b is unmapped, the parts already unmapped and the pages that are
	// no mapping of the device are left alone (munmap(2) would unmap the
	// latter too; here they may be Go memory). A b with no mapping of the
	// device in it (unmapped already, or never mapped) answers 0 and
	// unmaps nothing, as munmap(2) answers 0 for a range with no mapping.
	Munmap(b []byte) error
	// Close releases the device context, and undoes the Mmaps still in
	// place (their memory must not be used after it).
	Close() error
	// Numbering is the ioctl numbering the node takes.
	Numbering() Numbering
	// Name identifies the node, e.g. "/dev/accel/accel0" or "hlsim0 (emulated)".
	Name() string
	// Emulated reports whether this is the emulator.
	Emulated() bool
}

// FDBackend is a real habanalabs device node.
type FDBackend struct {
	f    *fd.FD
	path string
	num  Numbering

	mu   sync.Mutex
	maps []*fdMapping // the mappings not yet wholly unmapped
}

// fdMapping is one mapping Mmap made, and which of its pages Munmap has
// unmapped since.
type fdMapping struct {
	base  *byte
	pages int
	gone  []bool
}

// OpenFD opens the compute node at path with O_RDWR|O_CLOEXEC. It returns
// the raw errno wrapped in *Error (EBUSY: another process owns the device;
// EAGAIN: release or reset in progress).
func OpenFD(path string) (*FDBackend, error) {
	raw, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		errno, _ := err.(unix.Errno)
		return nil, &Error{Op: "open", Node: path, Errno: errno}
	}
	f, err := fd.New(raw)
	if err != nil {
		_ = unix.Close(raw)
		return nil, err
	}
	return &FDBackend{f: f, path: path, num: NumberingForNode(path)}, nil
}

// Ioctl implements Backend: an ioctl interrupted by a signal is issued
// again, but for WAIT_CS (Restartable), whose EINTR is returned.
func (b *FDBackend) Ioctl(req uintptr, arg unsafe.Pointer) error {
	raw := b.f.Int()
	if raw < 0 {
		return os.ErrClosed
	}
	err := IoctlFD(raw, req, arg)
	runtime.KeepAlive(b.f)
	return err
}

// Restartable reports whether ioctl req, interrupted by a signal (EINTR),
// may simply be issued again as it was: every request but WAIT_CS. The
// driver ends a WAIT_CS that a signal interrupts with -EINTR
// (hl_cs_wait_ioctl, command_submission.c: "user process got signal while
// waiting for CS handle"; older drivers also zero the argument union
// first, so the same call would wait on another seq). Issued again with
// its whole timeout, a wait that signals interrupt faster than that
// timeout would never end: its caller issues it again for the time left
// (dma's Device.Wait).
func Restartable(req uintptr) bool {
	_, nr, ok := Decode(req)
	return !ok || nr != nrWaitCS
}

// IoctlFD issues ioctl req on the open fd raw, again while it fails with
// EINTR and is Restartable. The pointer conversion happens in the Syscall
// expression, as the unsafe.Pointer rules require; the caller keeps the
// fd open during the call.
func IoctlFD(raw int, req uintptr, arg unsafe.Pointer) error {
	return restartEINTR(req, func() unix.Errno {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(raw), req, uintptr(arg))
		return e
	})
}

// restartEINTR runs call, again while it fails with EINTR and req is
// Restartable.
func restartEINTR(req uintptr, call func() unix.Errno) error {
	for {
		e := call()
		if e == unix.EINTR && Restartable(req) {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// Mmap implements Backend. It maps with unix.MmapPtr rather than
// unix.Mmap: x/sys's Munmap takes only a whole mapping, and Munmap here
// takes part of one, as the driver does.
func (b *FDBackend) Mmap(offset int64, length int) ([]byte, error) {
	raw := b.f.Int()
	if raw < 0 {
		return nil, os.ErrClosed
	}
	if length <= 0 {
		return nil, unix.EINVAL
	}
	p, err := unix.MmapPtr(raw, offset, nil, uintptr(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	runtime.KeepAlive(b.f)
	if err != nil {
		return nil, err
	}
	ps := os.Getpagesize()
	pages := (length + ps - 1) / ps
	b.mu.Lock()
	b.maps = append(b.maps, &fdMapping{base: (*byte)(p), pages: pages, gone: make([]bool, pages)})
	b.mu.Unlock()
	return unsafe.Slice((*byte)(p), length), nil
}

// Munmap implements Backend: as munmap(2) takes it, m must start on a
// page (EINVAL) and its length is rounded up to pages, and the range may
// hold part of a mapping, several mappings and pages that are no mapping
// of the node (torvalds/linux mm/vma.c do_vmi_munmap, do_vmi_align_munmap,
// vms_gather_munmap_vmas: every vma overlapping the range loses the part
// inside it; dma/hlsim RULES.md B10). It unmaps, of every mapping Mmap
// made, the pages in the range that the mapping still has: never a page
// given back before (another mapping may hold it by now: if the node's,
// its own entry covers it), nor a page of the range that is no mapping of
// the node (munmap(2) would unmap it too, but in a Go process it may be
// the runtime's memory). A range with none of the node's pages in it
// (unmapped already, or never mapped) answers 0 and unmaps nothing, as
// munmap(2) answers 0 for a range with no mapping in it.
func (b *FDBackend) Munmap(m []byte) error {
	ps := uintptr(os.Getpagesize())
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	if len(m) == 0 || lo%ps != 0 {
		return unix.EINVAL // do_vmi_munmap: start not page aligned, length 0
	}
	hi := lo + (uintptr(len(m))+ps-1)&^(ps-1)
	b.mu.Lock()
	defer b.mu.Unlock()
	var err error
	b.maps = slices.DeleteFunc(b.maps, func(mp *fdMapping) bool {
		base := uintptr(unsafe.Pointer(mp.base))
		end := base + uintptr(mp.pages)*ps
		if hi <= base || end <= lo {
			return false
		}
		if e := mp.unmap(int((max(lo, base)-base)/ps), int((min(hi, end)-base)/ps)); e != nil && err == nil {
			err = e
		}
		return mp.unmapped()
	})
	return err
}

// unmap unmaps the pages first..end-1 the mapping still has.
func (mp *fdMapping) unmap(first, end int) error {
	ps := os.Getpagesize()
	for p := first; p < end; {
		if mp.gone[p] {
			p++
			continue
		}
		q := p
		for q < end && !mp.gone[q] {
			q++
		}
		if err := unix.MunmapPtr(unsafe.Add(unsafe.Pointer(mp.base), p*ps), uintptr((q-p)*ps)); err != nil {
			return err
		}
		for ; p < q; p++ {
			mp.gone[p] = true
		}
	}
	return nil
}

func (mp *fdMapping) unmapped() bool {
	for _, g := range mp.gone {
		if !g {
			return false
		}
	}
	return true
}

// Close unmaps anything still mapped and closes the node. Idempotent.
func (b *FDBackend) Close() error {
	b.mu.Lock()
	for _, mp := range b.maps {
		_ = mp.unmap(0, mp.pages)
	}
	b.maps = nil
	b.mu.Unlock()
	return b.f.Close()
}

// Numbering implements Backend.
func (b *FDBackend) Numbering() Numbering { return b.num }

// Name implements Backend.
func (b *FDBackend) Name() string { return b.path }

// Emulated implements Backend.
func (b *FDBackend) Emulated() bool { return false }
