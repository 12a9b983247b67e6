package hlsys

import "structs"

// INFO ops (hl_info_args.op).
const (
	InfoHwIPInfo          = 0
	InfoHwEvents          = 1
	InfoDramUsage         = 2
	InfoHwIdle            = 3
	InfoDeviceStatus      = 4
	InfoResetCount        = 9
	InfoOpenStats         = 18
	InfoRegisterEventFD   = 28
	InfoUnregisterEventFD = 29
	InfoGetEvents         = 30
)

// Device status values (hl_info_device_status.status).
const (
	DeviceStatusOperational               = 0
	DeviceStatusInReset                   = 1
	DeviceStatusMalfunction               = 2
	DeviceStatusNeedsReset                = 3
	DeviceStatusInDeviceCreation          = 4
	DeviceStatusInResetAfterDeviceRelease = 5
)

// Notifier event bits (GET_EVENTS and the registered eventfd).
const (
	NotifierTPCAssert         = 1 << 0
	NotifierUndefinedOpcode   = 1 << 1
	NotifierDeviceReset       = 1 << 2
	NotifierCSTimeout         = 1 << 3
	NotifierDeviceUnavailable = 1 << 4
	NotifierUserEngineErr     = 1 << 5
	NotifierGeneralHWErr      = 1 << 6
)

// Sizes of the two hl_info_hw_ip_info generations.
const (
	HwIPInfoSize61  = 256 // kernel 6.1 header
	HwIPInfoSizeNew = 304 // newest upstream header
)

// InfoArgs is struct hl_info_args (24 bytes).
type InfoArgs struct {
	_             structs.HostLayout
	ReturnPointer uint64 // user buffer the kernel writes into
	ReturnSize    uint32
	Op            uint32
	Arg           uint32 // union: dcore_id, ctx_id, period_ms, pll_index, eventfd, ...
	Pad           uint32
}

// HwIPInfo is struct hl_info_hw_ip_info in its newest, 304-byte form. Older
// drivers fill only the first 256 bytes and leave the rest zero.
type HwIPInfo struct {
	_                             structs.HostLayout
	SramBaseAddress               uint64
	DramBaseAddress               uint64
	DramSize                      uint64
	SramSize                      uint32
	NumOfEvents                   uint32
	DeviceID                      uint32 // PCI device id
	ModuleID                      uint32
	DecoderEnabledMask            uint32
	FirstAvailableInterruptID     uint16
	ServerType                    uint16
	CpldVersion                   uint32
	PsocPciPllNr                  uint32
	PsocPciPllNf                  uint32
	PsocPciPllOd                  uint32
	PsocPciPllDivFactor           uint32
	TpcEnabledMask                uint8
	DramEnabled                   uint8
	SecurityEnabled               uint8
	MmeMasterSlaveMode            uint8
	CpucpVersion                  [128]byte
	CardName                      [16]byte
	TpcEnabledMaskExt             uint64
	DramPageSize                  uint64
	EdmaEnabledMask               uint32
	NumberOfUserInterrupts        uint16
	Reserved1                     uint8  // 6.1: low byte of pad2
	Reserved2                     uint8  // 6.1: high byte of pad2
	Reserved3                     uint64 // 6.1: reserved4
	DeviceMemAllocDefaultPageSize uint64 // last field of the 6.1 layout
	Reserved4                     uint64
	Reserved5                     uint64
	Reserved6                     uint32
	Reserved7                     uint8
	RevisionID                    uint8
	TpcInterruptID                uint16
	RotatorEnabledMask            uint32
	Reserved9                     uint32
	EngineCoreInterruptRegAddr    uint64
	ReservedDramSize              uint64
}

// DramUsage is struct hl_info_dram_usage.
type DramUsage struct {
	_           structs.HostLayout
	DramFreeMem uint64
	CtxDramMem  uint64
}

// DeviceStatus is struct hl_info_device_status.
type DeviceStatus struct {
	_      structs.HostLayout
	Status uint32
	Pad    uint32
}

// MEMORY ops (hl_mem_in.op).
const (
	MemOpAlloc        = 0
	MemOpFree         = 1
	MemOpMap          = 2
	MemOpUnmap        = 3
	MemOpMapBlock     = 4
	MemOpExportDMABuf = 5
	MemOpTSAlloc      = 6
)

// MEMORY flags (hl_mem_in.flags).
const (
	MemContiguous = 0x1
	MemShared     = 0x2
	MemUserPtr    = 0x4
	MemForceHint  = 0x8
	MemPrefetch   = 0x40
)

// MemArgs is union hl_mem_args (40 bytes). U holds the op-specific input
// union; the output (device_virt_addr, handle or fd) overlays U[0].
//
//	ALLOC:            U = {mem_size, page_size}
//	FREE:             U = {handle}
//	MAP (device):     U = {hint_addr, handle}
//	MAP (USERPTR):    U = {host_virt_addr, hint_addr, mem_size}
//	UNMAP:            U = {device_virt_addr}
//	EXPORT (6.1):     U = {handle, mem_size}
//	EXPORT (newer):   U = {addr, mem_size, offset}
type MemArgs struct {
	_             structs.HostLayout
	U             [3]uint64
	Op            uint32
	Flags         uint32
	CtxID         uint32
	NumOfElements uint32
}

// Out returns the 64-bit output word (device VA or handle).
func (m *MemArgs) Out() uint64 { return m.U[0] }

// OutFD returns the output as the s32 fd of EXPORT_DMABUF_FD.
func (m *MemArgs) OutFD() int32 { return int32(uint32(m.U[0])) }

// CB ops and flags.
const (
	CBOpCreate  = 0
	CBOpDestroy = 1
	CBOpInfo    = 2

	CBFlagsMap         = 0x1
	CBFlagsGetDeviceVA = 0x2

	// MaxCBSize is HL_MAX_CB_SIZE: 2 MiB minus room for two MSG_PROT packets.
	MaxCBSize = 0x200000 - 32

	// MmapTypeCB is HL_MMAP_TYPE_CB for 4 KiB pages: a kernel CB handle is
	// (id | MmapTypeCB) << 12 and is also the mmap offset of the CB.
	MmapTypeCB = uint64(0x2) << (59 - 12)
)

// CBArgs is union hl_cb_args (24 bytes). Handle is cb_handle on input and
// cb_handle, usage_cnt or device_va on output.
type CBArgs struct {
	_      structs.HostLayout
	Handle uint64
	Op     uint32
	CBSize uint32
	CtxID  uint32
	Flags  uint32
}

// CS limits, flags and statuses.
const (
	MaxJobsPerCS = 512

	CSChunkFlagsUserAllocCB = 0x1

	CSFlagsForceRestore       = 0x1
	CSFlagsSignal             = 0x2
	CSFlagsWait               = 0x4
	CSFlagsTimestamp          = 0x20
	CSFlagsCustomTimeout      = 0x200
	CSFlagsSkipResetOnTimeout = 0x400

	CSStatusSuccess = 0
)

// CSChunk is struct hl_cs_chunk (64 bytes).
type CSChunk struct {
	_                  structs.HostLayout
	CBHandle           uint64 // kernel CB handle, or device VA of a user CB
	QueueIndex         uint32
	CBSize             uint32
	Flags              uint32 // CSChunkFlagsUserAllocCB
	CollectiveEngineID uint32
	Pad                [40]byte
}

// CSIn is struct hl_cs_in (48 bytes). ChunksRestore and ChunksExecute are
// user pointers to CSChunk arrays; SubmitCS fills them.
type CSIn struct {
	_                structs.HostLayout
	ChunksRestore    uint64
	ChunksExecute    uint64
	Seq              uint64
	NumChunksRestore uint32
	NumChunksExecute uint32
	Timeout          uint32 // seconds, with CSFlagsCustomTimeout
	CSFlags          uint32
	CtxID            uint32
	Pad              uint32
}

// CSOut is struct hl_cs_out (24 bytes), overlaying CSIn.
type CSOut struct {
	_                        structs.HostLayout
	Seq                      uint64
	Status                   uint32
	SobBaseAddrOffset        uint32
	SobCountBeforeSubmission uint16
	Pad                      [3]uint16
}

// WAIT_CS statuses and flags.
const (
	WaitCSStatusCompleted = 0
	WaitCSStatusBusy      = 1
	WaitCSStatusTimedOut  = 2
	WaitCSStatusAborted   = 3

	WaitCSStatusFlagGone         = 0x1
	WaitCSStatusFlagTimestampVld = 0x2

	WaitCSFlagsInterrupt = 0x2
	WaitCSFlagsMultiCS   = 0x4
)

// WaitCSIn is struct hl_wait_cs_in (56 bytes).
type WaitCSIn struct {
	_                  structs.HostLayout
	Seq                uint64 // or addr / cq_counters_handle in interrupt modes
	TimeoutUs          uint64 // or target in interrupt modes
	CtxID              uint32
	Flags              uint32
	InterruptTimeoutUs uint64 // union with seq_arr_len (u8) for MULTI_CS
	CqCountersOffset   uint64
	TimestampHandle    uint64
	TimestampOffset    uint64
}

// WaitCSOut is struct hl_wait_cs_out (24 bytes), overlaying WaitCSIn.
type WaitCSOut struct {
	_               structs.HostLayout
	Status          uint32
	Flags           uint32
	TimestampNsec   int64
	CsCompletionMap uint32
	Pad             uint32
}

// PCI device ids reported in HwIPInfo.DeviceID.
const (
	PCIVendorHabana  = 0x1da3
	DeviceIDGoya     = 0x0001
	DeviceIDGaudi    = 0x1000
	DeviceIDGaudiSec = 0x1010
	DeviceIDGaudi2   = 0x1020
	DeviceIDGaudi3   = 0x1060
)
