// Package synapse finds the Habana runtime (SynapseAI's libSynapse.so)
// already loaded in this process and asks it for the compute fd of the
// device it acquired, as Intel's NIXL branch (registerSynapseAIMemoryExplicit)
// and UCX (uct_gaudi_base_get_fd) do, so that gxfer can attach to that
// device instead of opening it (the driver allows one compute context per
// device: hl_device_open answers EBUSY while one is active).
//
// The library is reached with dlopen through github.com/ebitengine/purego,
// without cgo (the project keeps cgo to internal/verbs). It is opened with
// RTLD_NOLOAD: gxfer only looks for a runtime the application already
// initialised, it never loads or initialises one itself.
//
// # The struct the runtime fills
//
// synDeviceGetInfoV2(uint32_t deviceId, synDeviceInfoV2 *info) returns a
// synStatus (0 = synSuccess). Synapse ignores deviceId and answers for the
// device the process acquired (synSingleton::getDeviceInfo ->
// DeviceManager::getDeviceInfo, HabanaAI/Intel_Gaudi3_Software,
// synapse/src/runtime/common/; see ../shared/reference/runtime-interop.md §1).
// This package binds the layout of synDeviceInfoV2 in
// HabanaAI/Intel_Gaudi3_Software synapse/include/synapse_common_types.h
// (Nov-2024 Synapse), with the x86-64 SysV natural alignment:
//
//	off  size field
//	  0     8 sramBaseAddress
//	  8     8 dramBaseAddress
//	 16     4 sramSize          (+4 padding)
//	 24     8 dramSize
//	 32     8 tpcEnabledMask
//	 40     1 dramEnabled       (+3 padding)
//	 44     4 deviceId
//	 48     4 fd
//	 52     4 deviceType        (enum synDeviceType)
//	 56     1 deviceIndex       (+7 padding)
//	 64     8 reserved          (globalHbmBaseAddress in HCL 1.21's copy)
//	 72       size
//
// The layout drifts between releases: HCL 1.21's copy names the last field
// globalHbmBaseAddress, and the older SynapseAI_Core header has a uint16
// tpcEnabledMask, which moves fd to offset 40. The runtime writes into a
// 512-byte buffer, so a larger struct cannot overrun it, and the fd found
// at offset 48 is checked: it must be open and name a habanalabs compute
// node (/dev/accel/accelN or /dev/hlN), else Lookup reports ErrLayout
// rather than hand back a wrong fd. Nothing else from the struct is relied
// on.
package synapse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"
)

// DefaultLibrary is the runtime's library name.
const DefaultLibrary = "libSynapse.so"

// Symbol is the runtime call Lookup makes.
const Symbol = "synDeviceGetInfoV2"

// rtldNoLoad is glibc's RTLD_NOLOAD (dlfcn.h): succeed only for a library
// already loaded.
const rtldNoLoad = 0x4

// Offsets in synDeviceInfoV2 (see the package comment).
const (
	offDramBase   = 8
	offDramSize   = 24
	offDeviceID   = 44
	offFD         = 48
	offDeviceType = 52
	infoBufSize   = 512
)

var (
	// ErrNotFound: no runtime to attach to (library not loaded in this
	// process, symbol missing, or the runtime has no device acquired).
	ErrNotFound = errors.New("habana runtime not found")
	// ErrLayout: the runtime answered, but its synDeviceInfoV2 does not
	// match the layout bound here.
	ErrLayout = errors.New("synDeviceInfoV2 layout mismatch")
)

// Error is a failed lookup. It wraps ErrNotFound or ErrLayout and the
// cause (the dlopen error text, the synStatus).
type Error struct {
	Kind   error  // ErrNotFound or ErrLayout
	Reason string // what was missing or wrong
	Err    error  // cause, may be nil
}

func (e *Error) Error() string {
	s := "synapse: " + e.Kind.Error() + ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns Kind and Err.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// Options configures Lookup. The zero value looks for DefaultLibrary.
type Options struct {
	// Library is the library to look for (default libSynapse.so); tests
	// point it at other libraries.
	Library string
}

// Info is what the runtime reported.
type Info struct {
	Library    string
	FD         int    // the runtime's compute fd: borrowed, never to be closed
	Node       string // what the fd names, e.g. /dev/accel/accel0
	DeviceID   uint32 // PCI device id
	DeviceType uint32 // synDeviceType (4 Gaudi2, 5 Gaudi3)
	DramBase   uint64
	DramSize   uint64
}

// Lookup finds the runtime loaded in this process and returns the compute
// fd of its device. Errors wrap ErrNotFound (with the reason) or
// ErrLayout.
func Lookup(opts Options) (Info, error) {
	lib := opts.Library
	if lib == "" {
		lib = DefaultLibrary
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|rtldNoLoad)
	if err != nil {
		return Info{}, &Error{Kind: ErrNotFound, Reason: lib + " is not loaded in this process (dlopen RTLD_NOLOAD); attach needs the runtime that owns the device, or pass its fd", Err: err}
	}
	defer func() { _ = purego.Dlclose(h) }()
	sym, err := purego.Dlsym(h, Symbol)
	if err != nil {
		return Info{}, &Error{Kind: ErrNotFound, Reason: lib + " has no " + Symbol, Err: err}
	}
	buf := new([infoBufSize]byte)
	var pin runtime.Pinner
	pin.Pin(buf)
	st, _, _ := purego.SyscallN(sym, 0, uintptr(unsafe.Pointer(&buf[0])))
	pin.Unpin()
	if status := uint32(st); status != 0 {
		return Info{}, &Error{Kind: ErrNotFound, Reason: fmt.Sprintf("%s returned synStatus %d (no device acquired by the runtime?)", Symbol, status)}
	}
	return parse(lib, buf[:])
}

var nodeRE = regexp.MustCompile(`^/dev/(accel/accel[0-9]+|hl[0-9]+)$`)

// parse reads the struct and checks the fd it names.
func parse(lib string, b []byte) (Info, error) {
	le := binary.LittleEndian
	info := Info{
		Library:    lib,
		FD:         int(int32(le.Uint32(b[offFD:]))),
		DeviceID:   le.Uint32(b[offDeviceID:]),
		DeviceType: le.Uint32(b[offDeviceType:]),
		DramBase:   le.Uint64(b[offDramBase:]),
		DramSize:   le.Uint64(b[offDramSize:]),
	}
	node, err := CheckNode(info.FD)
	if err != nil {
		return Info{}, &Error{Kind: ErrLayout, Reason: fmt.Sprintf("the fd field (offset %d) holds %d, which is not a habanalabs compute node; the installed runtime's synDeviceInfoV2 may differ from the layout bound here", offFD, info.FD), Err: err}
	}
	info.Node = node
	return info, nil
}

// sysDevChar links each character device number to its sysfs device
// (/sys/dev/char/MAJ:MIN).
const sysDevChar = "/sys/dev/char"

// habanalabs is the kernel driver behind Gaudi compute nodes.
const habanalabs = "habanalabs"

// CheckNode returns the device node fd names, and an error unless it is
// an open habanalabs compute node (/dev/accel/accelN or /dev/hlN, a
// character device). /dev/accel/accelN is the node of every DRM accel
// driver (ivpu, qaic, amdxdna, ...): an accel node is taken only when
// sysfs names habanalabs as the driver of its device
// (/sys/dev/char/MAJ:MIN/device/driver), as dma.Discover requires; a
// legacy /dev/hlN (the driver's own class) is refused only when sysfs
// names another driver.
func CheckNode(fd int) (string, error) {
	if fd < 0 {
		return "", fmt.Errorf("fd %d", fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("fstat fd %d: %w", fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return "", fmt.Errorf("fd %d is not a character device", fd)
	}
	p, err := os.Readlink(filepath.Join("/proc/self/fd", strconv.Itoa(fd)))
	if err != nil {
		return "", err
	}
	if !nodeRE.MatchString(p) {
		return "", fmt.Errorf("fd %d is %s", fd, p)
	}
	link := filepath.Join(sysDevChar, fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), "device", "driver")
	drv := ""
	if l, err := os.Readlink(link); err == nil {
		drv = filepath.Base(l)
	}
	switch {
	case drv == habanalabs:
	case drv != "":
		return "", fmt.Errorf("fd %d is %s, a device of driver %s, not %s", fd, p, drv, habanalabs)
	case strings.HasPrefix(p, "/dev/accel/"):
		return "", fmt.Errorf("fd %d is %s, whose driver sysfs does not name (%s): every accel driver has such nodes", fd, p, link)
	}
	return p, nil
}
