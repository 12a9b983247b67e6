package hlsim

import (
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// copyIn is copy_from_user for the small structures an ioctl reads from
// its caller (a CS's chunk array, a user counter): len(dst) bytes from
// host address addr, or EFAULT when the range is not readable. On amd64
// the bytes are read in place (userCopy, by address: no unsafe.Pointer is
// made of addr), with the goroutine's faults turned into a recovered
// panic (debug.SetPanicOnFault), which costs tens of nanoseconds where a
// process_vm_readv call costs a system call; elsewhere it is readHost.
// Bulk DMA keeps to readHost and writeHost.
func copyIn(dst []byte, addr uint64) error {
	if len(dst) == 0 {
		return nil
	}
	// Nothing is ever mapped in the first page (the kernel's
	// mmap_min_addr is larger), and Go reports a fault there as a nil
	// dereference that carries no address, which faultSafe would not
	// take for a fault: copy_from_user's EFAULT is decided here.
	if addr < firstUserAddr || addr+uint64(len(dst)) < addr {
		return unix.EFAULT
	}
	if !userCopyArch {
		return readHost(dst, addr)
	}
	return faultSafe(func() { userCopy(&dst[0], uintptr(addr), uintptr(len(dst))) })
}

// firstUserAddr is the lowest address copyIn reads: the end of the first
// page, below which the Go runtime reports a fault without its address.
const firstUserAddr = 0x1000

// faultSafe runs f, reporting EFAULT if it faults on a memory access
// instead of crashing the process. Other panics go on.
func faultSafe(f func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			err = unix.EFAULT
		}
	}()
	f()
	return nil
}
