package uapicheck

import (
	"unsafe"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// Const is one hlsys value and the C expression the header gives for it.
type Const struct {
	C    string // C expression (a macro, an enumerator, sizeof(...))
	Val  uint64 // hlsys's value
	Gens Gens
}

func k(c string, v uint64) Const    { return Const{C: c, Val: v, Gens: Both} }
func k61(c string, v uint64) Const  { return Const{C: c, Val: v, Gens: Only61} }
func kDRM(c string, v uint64) Const { return Const{C: c, Val: v, Gens: OnlyDRM} }
func u(v uintptr) uint64            { return uint64(v) }
func sz[T any]() uint64             { var t T; return uint64(unsafe.Sizeof(t)) }

// Consts is every hlsys constant that the uAPI header defines. The
// coverage test (coverage_test.go) fails when hlsys gains an exported
// constant that is neither here nor in its list of values the header does
// not define, with the reason.
func Consts() []Const {
	return []Const{
		// INFO ops (hl_info_args.op).
		k("HL_INFO_HW_IP_INFO", hlsys.InfoHwIPInfo),
		k("HL_INFO_HW_EVENTS", hlsys.InfoHwEvents),
		k("HL_INFO_DRAM_USAGE", hlsys.InfoDramUsage),
		k("HL_INFO_HW_IDLE", hlsys.InfoHwIdle),
		k("HL_INFO_DEVICE_STATUS", hlsys.InfoDeviceStatus),
		k("HL_INFO_RESET_COUNT", hlsys.InfoResetCount),
		k("HL_INFO_OPEN_STATS", hlsys.InfoOpenStats),
		k("HL_INFO_REGISTER_EVENTFD", hlsys.InfoRegisterEventFD),
		k("HL_INFO_UNREGISTER_EVENTFD", hlsys.InfoUnregisterEventFD),
		k("HL_INFO_GET_EVENTS", hlsys.InfoGetEvents),

		// Device status (enum hl_device_status).
		k("HL_DEVICE_STATUS_OPERATIONAL", hlsys.DeviceStatusOperational),
		k("HL_DEVICE_STATUS_IN_RESET", hlsys.DeviceStatusInReset),
		k("HL_DEVICE_STATUS_MALFUNCTION", hlsys.DeviceStatusMalfunction),
		k("HL_DEVICE_STATUS_NEEDS_RESET", hlsys.DeviceStatusNeedsReset),
		k("HL_DEVICE_STATUS_IN_DEVICE_CREATION", hlsys.DeviceStatusInDeviceCreation),
		k("HL_DEVICE_STATUS_IN_RESET_AFTER_DEVICE_RELEASE", hlsys.DeviceStatusInResetAfterDeviceRelease),

		// Notifier events.
		k("HL_NOTIFIER_EVENT_TPC_ASSERT", hlsys.NotifierTPCAssert),
		k("HL_NOTIFIER_EVENT_UNDEFINED_OPCODE", hlsys.NotifierUndefinedOpcode),
		k("HL_NOTIFIER_EVENT_DEVICE_RESET", hlsys.NotifierDeviceReset),
		k("HL_NOTIFIER_EVENT_CS_TIMEOUT", hlsys.NotifierCSTimeout),
		k("HL_NOTIFIER_EVENT_DEVICE_UNAVAILABLE", hlsys.NotifierDeviceUnavailable),
		k("HL_NOTIFIER_EVENT_USER_ENGINE_ERR", hlsys.NotifierUserEngineErr),
		k("HL_NOTIFIER_EVENT_GENERAL_HW_ERR", hlsys.NotifierGeneralHWErr),

		// hl_info_hw_ip_info sizes per generation.
		k61("sizeof(struct hl_info_hw_ip_info)", hlsys.HwIPInfoSize61),
		kDRM("sizeof(struct hl_info_hw_ip_info)", hlsys.HwIPInfoSizeNew),

		// MEMORY ops and flags.
		k("HL_MEM_OP_ALLOC", hlsys.MemOpAlloc),
		k("HL_MEM_OP_FREE", hlsys.MemOpFree),
		k("HL_MEM_OP_MAP", hlsys.MemOpMap),
		k("HL_MEM_OP_UNMAP", hlsys.MemOpUnmap),
		k("HL_MEM_OP_MAP_BLOCK", hlsys.MemOpMapBlock),
		k("HL_MEM_OP_EXPORT_DMABUF_FD", hlsys.MemOpExportDMABuf),
		k("HL_MEM_OP_TS_ALLOC", hlsys.MemOpTSAlloc),
		k("HL_MEM_CONTIGUOUS", hlsys.MemContiguous),
		k("HL_MEM_SHARED", hlsys.MemShared),
		k("HL_MEM_USERPTR", hlsys.MemUserPtr),
		k("HL_MEM_FORCE_HINT", hlsys.MemForceHint),
		k("HL_MEM_PREFETCH", hlsys.MemPrefetch),

		// CB ops, flags and limit.
		k("HL_CB_OP_CREATE", hlsys.CBOpCreate),
		k("HL_CB_OP_DESTROY", hlsys.CBOpDestroy),
		k("HL_CB_OP_INFO", hlsys.CBOpInfo),
		k("HL_CB_FLAGS_MAP", hlsys.CBFlagsMap),
		k("HL_CB_FLAGS_GET_DEVICE_VA", hlsys.CBFlagsGetDeviceVA),
		k("HL_MAX_CB_SIZE", hlsys.MaxCBSize),

		// CS limit, flags, status.
		k("HL_MAX_JOBS_PER_CS", hlsys.MaxJobsPerCS),
		k("HL_CS_CHUNK_FLAGS_USER_ALLOC_CB", hlsys.CSChunkFlagsUserAllocCB),
		k("HL_CS_FLAGS_FORCE_RESTORE", hlsys.CSFlagsForceRestore),
		k("HL_CS_FLAGS_SIGNAL", hlsys.CSFlagsSignal),
		k("HL_CS_FLAGS_WAIT", hlsys.CSFlagsWait),
		k("HL_CS_FLAGS_TIMESTAMP", hlsys.CSFlagsTimestamp),
		k("HL_CS_FLAGS_CUSTOM_TIMEOUT", hlsys.CSFlagsCustomTimeout),
		k("HL_CS_FLAGS_SKIP_RESET_ON_TIMEOUT", hlsys.CSFlagsSkipResetOnTimeout),
		k("HL_CS_STATUS_SUCCESS", hlsys.CSStatusSuccess),

		// WAIT_CS statuses and flags.
		k("HL_WAIT_CS_STATUS_COMPLETED", hlsys.WaitCSStatusCompleted),
		k("HL_WAIT_CS_STATUS_BUSY", hlsys.WaitCSStatusBusy),
		k("HL_WAIT_CS_STATUS_TIMEDOUT", hlsys.WaitCSStatusTimedOut),
		k("HL_WAIT_CS_STATUS_ABORTED", hlsys.WaitCSStatusAborted),
		k("HL_WAIT_CS_STATUS_FLAG_GONE", hlsys.WaitCSStatusFlagGone),
		k("HL_WAIT_CS_STATUS_FLAG_TIMESTAMP_VLD", hlsys.WaitCSStatusFlagTimestampVld),
		k("HL_WAIT_CS_FLAGS_INTERRUPT", hlsys.WaitCSFlagsInterrupt),
		k("HL_WAIT_CS_FLAGS_MULTI_CS", hlsys.WaitCSFlagsMultiCS),

		// Queue ids gxfer submits to or names.
		k("GAUDI_QUEUE_ID_DMA_0_0", hlsys.Gaudi1QueueDMA0_0),
		k("GAUDI_QUEUE_ID_DMA_1_0", hlsys.Gaudi1QueueDMA1_0),
		k("GAUDI_QUEUE_ID_CPU_PQ", hlsys.Gaudi1QueueCPUPQ),
		k("GAUDI2_QUEUE_ID_PDMA_0_0", hlsys.Gaudi2QueuePDMA0_0),
		k("GAUDI2_QUEUE_ID_PDMA_1_0", hlsys.Gaudi2QueuePDMA1_0),
		k("GAUDI2_QUEUE_ID_CPU_PQ", hlsys.Gaudi2QueueCPUPQ),
		k("GAUDI_QUEUE_ID_DMA_1_0 - GAUDI_QUEUE_ID_DMA_0_0", hlsys.StreamsPerDMAEngine),
		k("GAUDI2_QUEUE_ID_PDMA_1_0 - GAUDI2_QUEUE_ID_PDMA_0_0", hlsys.StreamsPerDMAEngine),

		// DMA-BUF export flags: the exporters accept only these.
		k("O_RDWR | O_CLOEXEC", hlsys.DMABufFlags),

		// Ioctl argument sizes: the constants and the Go types.
		k("sizeof(struct hl_info_args)", hlsys.SizeofInfoArgs),
		k("sizeof(union hl_cb_args)", hlsys.SizeofCBArgs),
		k("sizeof(union hl_cs_args)", hlsys.SizeofCSArgs),
		k("sizeof(union hl_wait_cs_args)", hlsys.SizeofWaitCSArgs),
		k("sizeof(union hl_mem_args)", hlsys.SizeofMemArgs),
		k("sizeof(struct hl_debug_args)", hlsys.SizeofDebugArgs),
		k("sizeof(union hl_cb_args)", sz[hlsys.CBArgs]()),
		k("sizeof(union hl_mem_args)", sz[hlsys.MemArgs]()),
		k("sizeof(union hl_cs_args)", sz[hlsys.CSArgs]()),
		k("sizeof(union hl_wait_cs_args)", sz[hlsys.WaitCSArgs]()),

		// Legacy 'H' request numbers: only the 6.1 header defines them.
		k61("HL_IOCTL_INFO", u(hlsys.LegacyInfo)),
		k61("HL_IOCTL_CB", u(hlsys.LegacyCB)),
		k61("HL_IOCTL_CS", u(hlsys.LegacyCS)),
		k61("HL_IOCTL_WAIT_CS", u(hlsys.LegacyWaitCS)),
		k61("HL_IOCTL_MEMORY", u(hlsys.LegacyMemory)),
		k61("HL_IOCTL_DEBUG", u(hlsys.LegacyDebug)),
		k61("HL_IOCTL_INFO", u(hlsys.Legacy.Request(hlsys.IoctlInfo))),
		k61("HL_IOCTL_MEMORY", u(hlsys.Legacy.Request(hlsys.IoctlMemory))),
		k61("HL_COMMAND_START", u(hlsys.LegacyInfo&0xff)),
		k61("HL_COMMAND_END", u(hlsys.LegacyDebug&0xff)+1),

		// DRM accel request numbers and the ioctl indices: only the 6.12
		// header defines them (where HL_IOCTL_* are the indices).
		kDRM("DRM_IOCTL_HL_INFO", u(hlsys.AccelInfo)),
		kDRM("DRM_IOCTL_HL_CB", u(hlsys.AccelCB)),
		kDRM("DRM_IOCTL_HL_CS", u(hlsys.AccelCS)),
		kDRM("DRM_IOCTL_HL_WAIT_CS", u(hlsys.AccelWaitCS)),
		kDRM("DRM_IOCTL_HL_MEMORY", u(hlsys.AccelMemory)),
		kDRM("DRM_IOCTL_HL_DEBUG", u(hlsys.AccelDebug)),
		kDRM("DRM_IOCTL_HL_INFO", u(hlsys.Accel.Request(hlsys.IoctlInfo))),
		kDRM("DRM_IOCTL_HL_MEMORY", u(hlsys.Accel.Request(hlsys.IoctlMemory))),
		kDRM("HL_IOCTL_INFO", hlsys.IoctlInfo),
		kDRM("HL_IOCTL_CB", hlsys.IoctlCB),
		kDRM("HL_IOCTL_CS", hlsys.IoctlCS),
		kDRM("HL_IOCTL_WAIT_CS", hlsys.IoctlWaitCS),
		kDRM("HL_IOCTL_MEMORY", hlsys.IoctlMemory),
		kDRM("HL_IOCTL_DEBUG", hlsys.IoctlDebug),
		kDRM("HL_COMMAND_START", u(hlsys.AccelInfo&0xff)),
		kDRM("HL_COMMAND_END", u(hlsys.AccelDebug&0xff)+1),
	}
}
