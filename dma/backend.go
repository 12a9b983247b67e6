package dma

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// Backend is what a Device drives: a habanalabs compute node (Open), the
// emulator (dma/hlsim's Device.Open), or anything that answers the
// driver's ioctls the same way. Implementations must be safe for
// concurrent use; Close must be idempotent.
//
// The ioctl numbering (the legacy 'H' numbers of /dev/hlN or the DRM
// accel numbers of /dev/accel/accelN) is the backend's own for gxfer's
// backends; for any other it follows Name: a name containing "/accel/"
// or starting with "accel" takes the accel numbers, anything else the
// legacy ones. A backend may also have a KernelRelease() string method
// (the emulator does); it picks the DMA-BUF export API (see NewDevice).
type Backend interface {
	// Ioctl performs one request on the device. arg points to the
	// request's argument struct (the driver's uAPI layout), which the
	// device reads and writes in place. A WAIT_CS a signal interrupts
	// should fail with EINTR as the driver's does: Wait issues it again
	// for the time left.
	Ioctl(req uintptr, arg unsafe.Pointer) error
	// Mmap maps length bytes of the device file at offset (Gaudi1's
	// kernel command buffers).
	Mmap(offset int64, length int) ([]byte, error)
	// Munmap undoes Mmap.
	Munmap(b []byte) error
	// Close releases the device context.
	Close() error
	// Name identifies the node, e.g. "/dev/accel/accel0" or "hlsim0 (emulated)".
	Name() string
	// Emulated reports whether this is the emulator.
	Emulated() bool
}

// driverBackend returns b as the driver binding's backend: b itself when
// it already is one (its numbering is its own), else b with the numbering
// of its name.
func driverBackend(b Backend) hlsys.Backend {
	if hb, ok := b.(hlsys.Backend); ok {
		return hb
	}
	return namedBackend{b}
}

// namedBackend numbers the ioctls of a Backend by its Name.
type namedBackend struct{ Backend }

func (n namedBackend) Numbering() hlsys.Numbering { return hlsys.NumberingForNode(n.Name()) }

// Numbering is the ioctl numbering a compute node takes.
type Numbering uint8

// Ioctl numberings (the driver binding's values; backend_test.go checks
// them).
const (
	// NumberingLegacy is the 'H' numbering of /dev/hlN nodes (kernels up
	// to 6.6).
	NumberingLegacy Numbering = 1
	// NumberingAccel is the DRM accel numbering of /dev/accel/accelN nodes
	// (kernel 6.7 on, where the driver registers a DRM accel device).
	NumberingAccel Numbering = 2
)

// String returns "legacy 'H' (/dev/hlN)" or "DRM accel (/dev/accel/accelN)".
func (n Numbering) String() string { return hlsys.Numbering(n).String() }

// HwInfo is what the driver's HW_IP_INFO reports of a device, read at
// Open (or Attach).
type HwInfo struct {
	DeviceID         uint32 // PCI device id (see ModelFromDeviceID)
	RevisionID       uint8  // ASIC revision
	ModuleID         uint32 // module id within the server
	CardName         string // board name, e.g. "HL-225"
	FirmwareVersion  string // CPU-CP firmware version string
	DramBase         uint64 // device DRAM base address
	DramSize         uint64 // device DRAM size in bytes
	DramPageSize     uint64 // device DRAM page size in bytes
	AllocPageSize    uint64 // device memory allocation granularity (Gaudi2/3; 0 if the driver does not say)
	ReservedDramSize uint64 // DRAM the driver keeps for itself, in bytes
	DramEnabled      bool   // device DRAM is in use
	SramBase         uint64 // on-chip SRAM base address
	SramSize         uint32 // on-chip SRAM size in bytes
}

func hwInfo(i hlsys.HwIPInfo) HwInfo {
	return HwInfo{
		DeviceID:         i.DeviceID,
		RevisionID:       i.RevisionID,
		ModuleID:         i.ModuleID,
		CardName:         unix.ByteSliceToString(i.CardName[:]),
		FirmwareVersion:  unix.ByteSliceToString(i.CpucpVersion[:]),
		DramBase:         i.DramBaseAddress,
		DramSize:         i.DramSize,
		DramPageSize:     i.DramPageSize,
		AllocPageSize:    i.DeviceMemAllocDefaultPageSize,
		ReservedDramSize: i.ReservedDramSize,
		DramEnabled:      i.DramEnabled != 0,
		SramBase:         i.SramBaseAddress,
		SramSize:         i.SramSize,
	}
}

// DramUsage is the driver's DRAM_USAGE: device memory in bytes.
type DramUsage struct {
	Free uint64 // free on the device
	Used uint64 // held by this compute context
}

// Chunk is one job of a command submission: Size bytes of packets in a
// command buffer, executed by queue Queue. CB.Chunk and CSBuilder.Seal
// make them.
type Chunk struct {
	Queue  uint32
	Handle uint64 // Gaudi1: the kernel CB's handle; Gaudi2/3: the user CB's device VA
	Size   uint32 // bytes of packets
	UserCB bool   // Handle is a user CB's device VA (CS_CHUNK_FLAGS_USER_ALLOC_CB)

	// Gaudi3 direct PDMA mode: Queue is a PDMA channel, and Submit copies
	// the packets themselves into its ring (Handle is 0).
	direct bool
	pkts   []byte
	incs   int    // packets that advance the channel's completion counter
	cb     *CB    // the command buffer the packets are in
	gen    uint32 // cb's Resets when the chunk was taken
}

func (c Chunk) raw() hlsys.CSChunk {
	r := hlsys.CSChunk{CBHandle: c.Handle, QueueIndex: c.Queue, CBSize: c.Size}
	if c.UserCB {
		r.Flags = hlsys.CSChunkFlagsUserAllocCB
	}
	return r
}
