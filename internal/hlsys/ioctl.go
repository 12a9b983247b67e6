package hlsys

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
)

// ioctl request encoding (asm-generic/ioctl.h): _IOWR = dir 3.
func iowr(typ byte, nr uint8, size uintptr) uintptr {
	return 3<<30 | size<<16 | uintptr(typ)<<8 | uintptr(nr)
}

// Indices of the habanalabs ioctls (HL_IOCTL_* in the newest header).
const (
	nrInfo   = 0
	nrCB     = 1
	nrCS     = 2
	nrWaitCS = 3
	nrMemory = 4
	nrDebug  = 5

	legacyType     = 'H'
	legacyNRBase   = 0x01
	drmType        = 'd'
	drmCommandBase = 0x40
)

// Sizes of the ioctl argument unions.
const (
	SizeofInfoArgs   = 24
	SizeofCBArgs     = 24
	SizeofCSArgs     = 48
	SizeofWaitCSArgs = 56
	SizeofMemArgs    = 40
	SizeofDebugArgs  = 40
)

var argSizes = [...]uintptr{SizeofInfoArgs, SizeofCBArgs, SizeofCSArgs, SizeofWaitCSArgs, SizeofMemArgs, SizeofDebugArgs}

// Request returns the ioctl request number of the ioctl with index nr
// (0 INFO, 1 CB, 2 CS, 3 WAIT_CS, 4 MEMORY, 5 DEBUG) in numbering n.
func (n Numbering) Request(nr int) uintptr {
	if n == Accel {
		return iowr(drmType, uint8(drmCommandBase+nr), argSizes[nr])
	}
	return iowr(legacyType, uint8(legacyNRBase+nr), argSizes[nr])
}

// Request numbers, exported for the header check and the emulator.
var (
	LegacyInfo   = Legacy.Request(nrInfo)
	LegacyCB     = Legacy.Request(nrCB)
	LegacyCS     = Legacy.Request(nrCS)
	LegacyWaitCS = Legacy.Request(nrWaitCS)
	LegacyMemory = Legacy.Request(nrMemory)
	LegacyDebug  = Legacy.Request(nrDebug)
	AccelInfo    = Accel.Request(nrInfo)
	AccelCB      = Accel.Request(nrCB)
	AccelCS      = Accel.Request(nrCS)
	AccelWaitCS  = Accel.Request(nrWaitCS)
	AccelMemory  = Accel.Request(nrMemory)
	AccelDebug   = Accel.Request(nrDebug)
)

// Decode maps a request number back to (numbering, ioctl index). ok is false
// for a request that is neither.
func Decode(req uintptr) (n Numbering, nr int, ok bool) {
	switch byte(req >> 8) {
	case legacyType:
		n, nr = Legacy, int(uint8(req))-legacyNRBase
	case drmType:
		n, nr = Accel, int(uint8(req))-drmCommandBase
	default:
		return 0, 0, false
	}
	if nr < 0 || nr >= len(argSizes) || req != n.Request(nr) {
		return 0, 0, false
	}
	return n, nr, true
}

// Ioctl indices for Decode.
const (
	IoctlInfo   = nrInfo
	IoctlCB     = nrCB
	IoctlCS     = nrCS
	IoctlWaitCS = nrWaitCS
	IoctlMemory = nrMemory
	IoctlDebug  = nrDebug
)

// CSArgs is union hl_cs_args: CSIn on input, CSOut on output.
type CSArgs struct{ In CSIn }

// Out views the union as its output.
func (a *CSArgs) Out() *CSOut { return (*CSOut)(unsafe.Pointer(&a.In)) }

// WaitCSArgs is union hl_wait_cs_args.
type WaitCSArgs struct{ In WaitCSIn }

// Out views the union as its output.
func (a *WaitCSArgs) Out() *WaitCSOut { return (*WaitCSOut)(unsafe.Pointer(&a.In)) }

// Info performs HL_IOCTL_INFO.
func Info(b Backend, args *InfoArgs) error {
	return b.Ioctl(b.Numbering().Request(nrInfo), unsafe.Pointer(args))
}

// CommandBuffer performs HL_IOCTL_CB.
func CommandBuffer(b Backend, args *CBArgs) error {
	return b.Ioctl(b.Numbering().Request(nrCB), unsafe.Pointer(args))
}

// CommandSubmission performs HL_IOCTL_CS.
func CommandSubmission(b Backend, args *CSArgs) error {
	return b.Ioctl(b.Numbering().Request(nrCS), unsafe.Pointer(args))
}

// WaitCS performs HL_IOCTL_WAIT_CS.
func WaitCS(b Backend, args *WaitCSArgs) error {
	return b.Ioctl(b.Numbering().Request(nrWaitCS), unsafe.Pointer(args))
}

// Memory performs HL_IOCTL_MEMORY.
func Memory(b Backend, args *MemArgs) error {
	return b.Ioctl(b.Numbering().Request(nrMemory), unsafe.Pointer(args))
}

// info runs one INFO op returning into out.
//
// out is pinned for the call: pinning moves it to the heap and keeps it
// there, so the address stored in the struct stays valid even when the
// backend runs Go code on this goroutine (the emulator), whose stack may
// grow and move during the call.
func info(b Backend, op uint32, arg uint32, out unsafe.Pointer, size uintptr, name string) error {
	var pin runtime.Pinner
	pin.Pin(out)
	defer pin.Unpin()
	a := &InfoArgs{ReturnPointer: uint64(uintptr(out)), ReturnSize: uint32(size), Op: op, Arg: arg}
	return wrap(b, name, Info(b, a))
}

// GetHwIPInfo returns HW_IP_INFO, always passing the 304-byte buffer.
func GetHwIPInfo(b Backend) (HwIPInfo, error) {
	out := new(HwIPInfo)
	err := info(b, InfoHwIPInfo, 0, unsafe.Pointer(out), unsafe.Sizeof(*out), "INFO HW_IP_INFO")
	return *out, err
}

// GetDramUsage returns DRAM_USAGE.
func GetDramUsage(b Backend) (DramUsage, error) {
	out := new(DramUsage)
	err := info(b, InfoDramUsage, 0, unsafe.Pointer(out), unsafe.Sizeof(*out), "INFO DRAM_USAGE")
	return *out, err
}

// GetDeviceStatus returns DEVICE_STATUS.
func GetDeviceStatus(b Backend) (uint32, error) {
	out := new(DeviceStatus)
	err := info(b, InfoDeviceStatus, 0, unsafe.Pointer(out), unsafe.Sizeof(*out), "INFO DEVICE_STATUS")
	return out.Status, err
}

// GetEvents returns and clears the notifier event bitmask (GET_EVENTS).
func GetEvents(b Backend) (uint64, error) {
	out := new(uint64)
	err := info(b, InfoGetEvents, 0, unsafe.Pointer(out), 8, "INFO GET_EVENTS")
	return *out, err
}

// RegisterEventFD asks the driver to signal efd on notifier events.
func RegisterEventFD(b Backend, efd int) error {
	a := &InfoArgs{Op: InfoRegisterEventFD, Arg: uint32(efd)}
	return wrap(b, "INFO REGISTER_EVENTFD", Info(b, a))
}

// UnregisterEventFD undoes RegisterEventFD.
func UnregisterEventFD(b Backend) error {
	a := &InfoArgs{Op: InfoUnregisterEventFD}
	return wrap(b, "INFO UNREGISTER_EVENTFD", Info(b, a))
}

// MemAlloc allocates device memory (Gaudi2+: returns a handle; Gaudi1:
// accounting only, handle 0). pageSize 0 means the default.
func MemAlloc(b Backend, size, pageSize uint64, flags uint32) (uint64, error) {
	a := &MemArgs{U: [3]uint64{size, pageSize}, Op: MemOpAlloc, Flags: flags}
	if err := Memory(b, a); err != nil {
		return 0, wrap(b, "MEMORY ALLOC", err)
	}
	return a.Out(), nil
}

// MemFree frees a handle (Gaudi1: the size given to MemAlloc). The handle
// must be unmapped first.
func MemFree(b Backend, handle uint64) error {
	a := &MemArgs{U: [3]uint64{handle}, Op: MemOpFree}
	return wrap(b, "MEMORY FREE", Memory(b, a))
}

// MemMapDevice maps an allocation into the device MMU and returns its VA.
func MemMapDevice(b Backend, handle, hint uint64, flags uint32) (uint64, error) {
	a := &MemArgs{U: [3]uint64{hint, handle}, Op: MemOpMap, Flags: flags &^ MemUserPtr}
	if err := Memory(b, a); err != nil {
		return 0, wrap(b, "MEMORY MAP device", err)
	}
	return a.Out(), nil
}

// MemMapHost pins size bytes of host memory at host and maps them into the
// device MMU (USERPTR). The returned VA includes host's in-page offset; keep
// it for MemUnmap. host must stay mapped until then.
//
// Memory on a goroutine stack must not be mapped (the device keeps using
// it after the call); the caller's buffer must be heap or mmap memory.
func MemMapHost(b Backend, host unsafe.Pointer, size, hint uint64, flags uint32) (uint64, error) {
	a := &MemArgs{U: [3]uint64{uint64(uintptr(host)), hint, size}, Op: MemOpMap, Flags: flags | MemUserPtr}
	err := Memory(b, a)
	runtime.KeepAlive(host)
	if err != nil {
		return 0, wrap(b, "MEMORY MAP host", err)
	}
	return a.Out(), nil
}

// MemUnmap unmaps a device VA returned by a MAP.
func MemUnmap(b Backend, va uint64) error {
	a := &MemArgs{U: [3]uint64{va}, Op: MemOpUnmap}
	return wrap(b, "MEMORY UNMAP", Memory(b, a))
}

// DMABufFlags are the only file flags the exporters accept.
const DMABufFlags = unix.O_RDWR | unix.O_CLOEXEC

// MemExportDMABuf61 exports a DMA-BUF with the kernel 6.1 API: Gaudi2 passes
// the ALLOC handle (the whole allocation is exported), Gaudi1 the physical
// DRAM address and size.
func MemExportDMABuf61(b Backend, handle, size uint64) (*fd.FD, error) {
	a := &MemArgs{U: [3]uint64{handle, size}, Op: MemOpExportDMABuf, Flags: DMABufFlags}
	return exportFD(b, a)
}

// MemExportDMABuf exports a DMA-BUF with the newer API: addr is exactly a
// device VA returned by MAP (Gaudi2) or a physical DRAM address (Gaudi1),
// offset is page aligned (0 on Gaudi1).
func MemExportDMABuf(b Backend, addr, size, offset uint64) (*fd.FD, error) {
	a := &MemArgs{U: [3]uint64{addr, size, offset}, Op: MemOpExportDMABuf, Flags: DMABufFlags}
	return exportFD(b, a)
}

func exportFD(b Backend, a *MemArgs) (*fd.FD, error) {
	if err := Memory(b, a); err != nil {
		return nil, wrap(b, "MEMORY EXPORT_DMABUF_FD", err)
	}
	return fd.New(int(a.OutFD()))
}

// CBCreate creates a kernel command buffer and returns its handle, which is
// also its mmap offset.
func CBCreate(b Backend, size uint32, flags uint32) (uint64, error) {
	a := &CBArgs{Op: CBOpCreate, CBSize: size, Flags: flags}
	if err := CommandBuffer(b, a); err != nil {
		return 0, wrap(b, "CB CREATE", err)
	}
	return a.Handle, nil
}

// CBDestroy destroys a kernel command buffer.
func CBDestroy(b Backend, handle uint64) error {
	a := &CBArgs{Handle: handle, Op: CBOpDestroy}
	return wrap(b, "CB DESTROY", CommandBuffer(b, a))
}

// CBDeviceVA returns the device VA of a CB created with CBFlagsMap.
func CBDeviceVA(b Backend, handle uint64) (uint64, error) {
	a := &CBArgs{Handle: handle, Op: CBOpInfo, Flags: CBFlagsGetDeviceVA}
	if err := CommandBuffer(b, a); err != nil {
		return 0, wrap(b, "CB INFO", err)
	}
	return a.Handle, nil
}

// SubmitCS submits a command submission of execute chunks (and optional
// restore chunks). It does not retry: EAGAIN (completion slot or queue full)
// and EINTR are returned for the caller to retry. On error the returned
// CSOut is zero.
func SubmitCS(b Backend, restore, execute []CSChunk, flags, timeoutSec uint32) (CSOut, error) {
	a := &CSArgs{In: CSIn{
		NumChunksRestore: uint32(len(restore)),
		NumChunksExecute: uint32(len(execute)),
		Timeout:          timeoutSec,
		CSFlags:          flags,
	}}
	// The chunk arrays are pinned for the call (see info).
	var pin runtime.Pinner
	defer pin.Unpin()
	if len(restore) > 0 {
		pin.Pin(&restore[0])
		a.In.ChunksRestore = uint64(uintptr(unsafe.Pointer(&restore[0])))
	}
	if len(execute) > 0 {
		pin.Pin(&execute[0])
		a.In.ChunksExecute = uint64(uintptr(unsafe.Pointer(&execute[0])))
	}
	if err := CommandSubmission(b, a); err != nil {
		// On failure the driver may leave the input in place (EAGAIN), so
		// the output view holds no meaningful values.
		return CSOut{}, wrap(b, "CS", err)
	}
	return *a.Out(), nil
}

// SubmitCSIn is SubmitCS of execute chunks only, with the caller's
// argument struct and without pinning: a and execute's array must be heap
// objects (fields of a pooled struct, say), which the emulator's calls on
// this goroutine cannot move as they can a stack; they stay reachable for
// the call. A submitter reuses them rather than pin and allocate per CS.
func SubmitCSIn(b Backend, a *CSArgs, execute []CSChunk, flags, timeoutSec uint32) (CSOut, error) {
	*a = CSArgs{In: CSIn{NumChunksExecute: uint32(len(execute)), Timeout: timeoutSec, CSFlags: flags}}
	if len(execute) > 0 {
		a.In.ChunksExecute = uint64(uintptr(unsafe.Pointer(&execute[0])))
	}
	err := CommandSubmission(b, a)
	runtime.KeepAlive(execute)
	if err != nil {
		return CSOut{}, wrap(b, "CS", err)
	}
	return *a.Out(), nil
}

// WaitForCS waits up to timeoutUs (0 polls) for CS seq. The output is
// returned even when the ioctl fails: -ETIMEDOUT comes with status
// TIMEDOUT and -EIO with ABORTED. A timeout with the CS still running is
// not an error: status BUSY.
func WaitForCS(b Backend, seq, timeoutUs uint64) (WaitCSOut, error) {
	return WaitForCSIn(b, new(WaitCSArgs), seq, timeoutUs)
}

// WaitForCSIn is WaitForCS with the caller's argument struct (a poller
// reuses one rather than allocate one per WAIT_CS: the struct escapes to
// the heap through the Backend call).
func WaitForCSIn(b Backend, a *WaitCSArgs, seq, timeoutUs uint64) (WaitCSOut, error) {
	*a = WaitCSArgs{In: WaitCSIn{Seq: seq, TimeoutUs: timeoutUs}}
	err := WaitCS(b, a)
	return *a.Out(), wrap(b, "WAIT_CS", err)
}
