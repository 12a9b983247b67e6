package hlsys

import (
	"runtime"
	"unsafe"
)

// This file holds what Gaudi3's direct PDMA mode needs from the uAPI on top
// of the Gaudi1/2 calls: mapping a register block into the process
// (HL_MEM_OP_MAP_BLOCK plus mmap), the user-interrupt form of WAIT_CS, the
// Gaudi3 PCI ids, and the user-owned PDMA channel mask of hw_ip_info. See
// docs/gaudi3.md for the programming model and the sources.

// More Gaudi3 PCI device ids (drivers.accel.habanalabs.kernel
// include/common/pci_ids.h, enum hl_pci_ids). DeviceIDGaudi3 (0x1060) is in
// abi.go.
const (
	DeviceIDGaudi3Die1      = 0x1061 // PCI_IDS_GAUDI3_DIE1
	DeviceIDGaudi3SingleDie = 0x1062 // PCI_IDS_GAUDI3_SINGLE_DIE
	DeviceIDGaudi3HL338     = 0x1063 // PCI_IDS_GAUDI3_HL_338
)

// IsGaudi3 reports whether a hw_ip_info device id is one of the Gaudi3
// ASIC ids (simulator and FPGA ids excluded).
func IsGaudi3(deviceID uint32) bool {
	switch deviceID {
	case DeviceIDGaudi3, DeviceIDGaudi3Die1, DeviceIDGaudi3SingleDie, DeviceIDGaudi3HL338:
		return true
	}
	return false
}

// MmapTypeBlock is the driver's HL_MMAP_TYPE_BLOCK for 4 KiB pages in the
// drivers whose mmap type field starts at bit 59 (common/habanalabs.h: 0x4
// << (59 - PAGE_SHIFT)). As with MmapTypeCB, a block handle is (block id |
// MmapTypeBlock) << 12 (common/memory.c map_block), which is also its mmap
// byte offset. Older drivers put the type at bit 61, so callers must never
// build a block handle: MemMapBlock returns it and it goes to mmap
// unchanged. Emulators use this value to issue handles as the current
// driver does.
const MmapTypeBlock = uint64(0x4) << (59 - 12)

// More WAIT_CS flags (hl_wait_cs_in.flags). With WaitCSFlagsInterrupt, bits
// 31..20 hold the user interrupt id (WaitCSFlagsInterruptMask); all ones
// there (WaitCSFlagsAnyCQInterrupt) waits for any completion-queue
// interrupt, 0xFFE (WaitCSFlagsAnyDecInterrupt) for any decoder interrupt.
const (
	WaitCSFlagsInterruptMask     = 0xFFF00000
	WaitCSFlagsInterruptShift    = 20
	WaitCSFlagsAnyCQInterrupt    = 0xFFF00000
	WaitCSFlagsAnyDecInterrupt   = 0xFFE00000
	WaitCSFlagsInterruptKernelCQ = 0x10
	WaitCSFlagsRegisterInterrupt = 0x20
)

// PDMAUserOwnedChMask returns hw_ip_info.pdma_user_owned_ch_mask: bit n set
// means PDMA channel n (0..23, see internal/gaudi3) is enabled and left to
// user space. Intel's header names the u64 at this offset
// pdma_user_owned_ch_mask; the upstream 6.12 header calls it reserved3 and
// the 6.1 header reserved4 (Reserved3 here). Drivers without Gaudi3
// support leave it 0.
func (h *HwIPInfo) PDMAUserOwnedChMask() uint64 { return h.Reserved3 }

// BlockOut returns MAP_BLOCK's output: block_handle (the mmap offset) in
// the first u64 and block_size in the low 32 bits of the second.
func (m *MemArgs) BlockOut() (handle uint64, size uint32) { return m.U[0], uint32(m.U[1]) }

// MemMapBlock asks the driver for an mmap handle of the register block at
// blockAddr, an absolute configuration-space address (on Gaudi3 the
// driver's cfg_base_address plus the block offset). It returns the handle,
// which is the byte offset to pass to mmap, and the block size, which is
// the only length the driver accepts.
func MemMapBlock(b Backend, blockAddr uint64) (handle uint64, size uint32, err error) {
	a := &MemArgs{U: [3]uint64{blockAddr}, Op: MemOpMapBlock}
	if err := Memory(b, a); err != nil {
		return 0, 0, wrap(b, "MEMORY MAP_BLOCK", err)
	}
	handle, size = a.BlockOut()
	return handle, size, nil
}

// waitInterruptFlags is the flags word for a user-interrupt wait: the
// interrupt id goes to bits 31..20.
func waitInterruptFlags(interruptID uint32, extra uint32) uint32 {
	return WaitCSFlagsInterrupt | extra | (interruptID<<WaitCSFlagsInterruptShift)&WaitCSFlagsInterruptMask
}

// WaitForInterruptKernelCQ waits up to timeoutUs for user interrupt
// interruptID and for the u64 counter at index cqIndex (an index of u64
// words, not a byte offset) of the kernel command buffer cbHandle to reach
// target (the driver compares counter >= target). Status BUSY with a nil
// error means the time ran out first; -ETIMEDOUT is also possible, as for
// WaitForCS.
func WaitForInterruptKernelCQ(b Backend, cbHandle, cqIndex, target uint64, interruptID uint32, timeoutUs uint64) (WaitCSOut, error) {
	a := &WaitCSArgs{In: WaitCSIn{
		Seq: cbHandle, TimeoutUs: target, CqCountersOffset: cqIndex, InterruptTimeoutUs: timeoutUs,
		Flags: waitInterruptFlags(interruptID, WaitCSFlagsInterruptKernelCQ),
	}}
	err := WaitCS(b, a)
	return *a.Out(), wrap(b, "WAIT_CS interrupt kernel CQ", err)
}

// WaitForInterruptUser is WaitForInterruptKernelCQ with the counter in user
// memory: on each interrupt the driver reads the u64 at counter and
// compares it with target (the uAPI comment of hl_wait_cs_in.addr). counter
// must stay valid until the call returns.
func WaitForInterruptUser(b Backend, counter *uint64, target uint64, interruptID uint32, timeoutUs uint64) (WaitCSOut, error) {
	a := &WaitCSArgs{In: WaitCSIn{
		Seq: uint64(uintptr(unsafe.Pointer(counter))), TimeoutUs: target, InterruptTimeoutUs: timeoutUs,
		Flags: waitInterruptFlags(interruptID, 0),
	}}
	err := WaitCS(b, a)
	runtime.KeepAlive(counter)
	return *a.Out(), wrap(b, "WAIT_CS interrupt user", err)
}
