package hlsim

import (
	"bufio"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Host memory is reached the way the kernel reaches user memory: by
// address, never by converting a uint64 into an unsafe.Pointer (which would
// break checkptr and go vet). process_vm_readv/writev on this process play
// copy_from_user/copy_to_user; a bad address yields EFAULT instead of a
// crash, so a DMA through a stale host mapping fails its CS cleanly. The
// small structures an ioctl reads take copyIn, which reads in place where
// it can and turns a fault into EFAULT the same way.

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
// (an ioctl argument or a chunk array owned by the emulator), as
// copy_from_user does (copyIn).
func readStruct(p unsafe.Pointer, size uintptr, addr uint64) error {
	return copyIn(unsafe.Slice((*byte)(p), size), addr)
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

// hugeTLBBacked reports whether [start, end) is 2 MiB aligned, a multiple
// of 2 MiB, and backed by hugetlbfs pages of at least 2 MiB in every
// mapping it crosses (/proc/self/smaps KernelPageSize): the case in which
// the pinned pages' DMA addresses are 2 MiB aligned and the driver maps
// them with huge PMMU pages. Transparent huge pages are not counted:
// whether they are huge when the driver pins them is up to the kernel.
func hugeTLBBacked(start, end uint64) bool {
	if start%hugePageSize != 0 || (end-start)%hugePageSize != 0 || end <= start {
		return false
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	covered := start // [start, covered) is known to be hugetlb-backed
	var lo, hi uint64
	inRange := false
	for sc.Scan() {
		line := sc.Text()
		if l, h, ok := parseMapsRange(line); ok {
			lo, hi = l, h
			inRange = lo < end && hi > start
			if lo >= end {
				break
			}
			continue
		}
		if !inRange || !strings.HasPrefix(line, "KernelPageSize:") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "KernelPageSize:"), "kB")), 10, 64)
		if err != nil || kb*1024 < hugePageSize || lo > covered {
			return false
		}
		covered = max(covered, hi)
	}
	return covered >= end
}

// parseMapsRange parses the "lo-hi " head of a /proc/self/{maps,smaps}
// mapping line.
func parseMapsRange(line string) (lo, hi uint64, ok bool) {
	dash := strings.IndexByte(line, '-')
	sp := strings.IndexByte(line, ' ')
	if dash <= 0 || sp <= dash {
		return 0, 0, false
	}
	lo, err1 := strconv.ParseUint(line[:dash], 16, 64)
	hi, err2 := strconv.ParseUint(line[dash+1:sp], 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return lo, hi, true
}
