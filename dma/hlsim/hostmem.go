package hlsim

import (
	"errors"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Host memory is reached the way the kernel reaches user memory: by
// address, never by converting a uint64 into an unsafe.Pointer (which would
// break checkptr and go vet). process_vm_readv/writev on this process play
// copy_from_user/copy_to_user; a bad address yields EFAULT instead of a
// crash, so a DMA through a stale host mapping fails its CS cleanly.

// maxHostRW bounds one process_vm call (the kernel's MAX_RW_COUNT is just
// under 2 GiB).
const maxHostRW = 1 << 30

// readHost copies len(dst) bytes from host address addr into dst.
func readHost(dst []byte, addr uint64) error { return hostRW(false, dst, addr) }

// writeHost copies src to host address addr.
func writeHost(addr uint64, src []byte) error { return hostRW(true, src, addr) }

func hostRW(write bool, local []byte, addr uint64) error {
	for len(local) > 0 {
		n := min(len(local), maxHostRW)
		if addr+uint64(n) < addr {
			return unix.EFAULT
		}
		liov := [1]unix.Iovec{{Base: &local[0]}}
		liov[0].SetLen(n)
		riov := [1]unix.RemoteIovec{{Base: uintptr(addr), Len: n}}
		var (
			got int
			err error
		)
		if write {
			got, err = unix.ProcessVMWritev(selfPID, liov[:], riov[:], 0)
		} else {
			got, err = unix.ProcessVMReadv(selfPID, liov[:], riov[:], 0)
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || got <= 0 {
			return unix.EFAULT
		}
		local = local[got:]
		addr += uint64(got)
	}
	return nil
}

// readStruct copies size bytes at host address addr into the object at p
// (an ioctl argument or a chunk array owned by the emulator).
func readStruct(p unsafe.Pointer, size uintptr, addr uint64) error {
	if addr == 0 {
		return unix.EFAULT
	}
	return readHost(unsafe.Slice((*byte)(p), size), addr)
}

// hostRangeMapped checks that every page of [addr, addr+size) is mapped in
// this process (mincore fails with ENOMEM on a hole), as pinning the pages
// would. It does not check that they are writable.
func hostRangeMapped(addr, size uint64) error {
	start := addr &^ (pageSize - 1)
	end := addr + size
	if end < addr {
		return unix.EFAULT
	}
	end = (end + pageSize - 1) &^ (pageSize - 1)
	const batch = 1 << 16 // pages per mincore call
	var vec [batch]byte
	for p := start; p < end; {
		pages := min((end-p)/pageSize, batch)
		_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(p), uintptr(pages*pageSize), uintptr(unsafe.Pointer(&vec[0])))
		if e != 0 {
			return unix.EFAULT
		}
		p += pages * pageSize
	}
	return nil
}

// probeHostAccess checks that process_vm_readv works on this process
// (seccomp profiles may forbid it).
func probeHostAccess() error {
	src := []byte("hlsim")
	dst := make([]byte, len(src))
	err := readHostRaw(dst, uint64(uintptr(unsafe.Pointer(&src[0]))))
	runtime.KeepAlive(src)
	if err != nil {
		return err
	}
	if string(dst) != string(src) {
		return errors.New("process_vm_readv returned wrong bytes")
	}
	return nil
}

func readHostRaw(dst []byte, addr uint64) error {
	liov := [1]unix.Iovec{{Base: &dst[0]}}
	liov[0].SetLen(len(dst))
	riov := [1]unix.RemoteIovec{{Base: uintptr(addr), Len: len(dst)}}
	_, err := unix.ProcessVMReadv(selfPID, liov[:], riov[:], 0)
	return err
}
