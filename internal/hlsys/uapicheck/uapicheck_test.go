//go:build cgo

package uapicheck

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// goSide computes, from the Go declarations in hlsys, the value of every
// entry the C table has.
func goSide() map[string]uint64 {
	var (
		info  hlsys.InfoArgs
		hw    hlsys.HwIPInfo
		du    hlsys.DramUsage
		ds    hlsys.DeviceStatus
		mem   hlsys.MemArgs
		cb    hlsys.CBArgs
		chunk hlsys.CSChunk
		csIn  hlsys.CSIn
		csOut hlsys.CSOut
		csA   hlsys.CSArgs
		wIn   hlsys.WaitCSIn
		wOut  hlsys.WaitCSOut
		wA    hlsys.WaitCSArgs
	)
	u := func(v uintptr) uint64 { return uint64(v) }
	m := map[string]uint64{
		"sizeof struct hl_info_args":           u(unsafe.Sizeof(info)),
		"struct hl_info_args.return_pointer":   u(unsafe.Offsetof(info.ReturnPointer)),
		"struct hl_info_args.return_size":      u(unsafe.Offsetof(info.ReturnSize)),
		"struct hl_info_args.op":               u(unsafe.Offsetof(info.Op)),
		"struct hl_info_args.dcore_id":         u(unsafe.Offsetof(info.Arg)),
		"struct hl_info_args.pad":              u(unsafe.Offsetof(info.Pad)),
		"sizeof struct hl_info_hw_ip_info":     hlsys.HwIPInfoSize61,
		"sizeof struct hl_info_hw_ip_info_new": u(unsafe.Sizeof(hw)),

		"sizeof struct hl_info_dram_usage":        u(unsafe.Sizeof(du)),
		"struct hl_info_dram_usage.dram_free_mem": u(unsafe.Offsetof(du.DramFreeMem)),
		"struct hl_info_dram_usage.ctx_dram_mem":  u(unsafe.Offsetof(du.CtxDramMem)),
		"sizeof struct hl_info_device_status":     u(unsafe.Sizeof(ds)),
		"struct hl_info_device_status.status":     u(unsafe.Offsetof(ds.Status)),
		"struct hl_info_device_status.pad":        u(unsafe.Offsetof(ds.Pad)),

		"sizeof union hl_mem_args":                   u(unsafe.Sizeof(mem)),
		"sizeof struct hl_mem_in":                    u(unsafe.Sizeof(mem)),
		"struct hl_mem_in.alloc.mem_size":            u(unsafe.Offsetof(mem.U)),
		"struct hl_mem_in.alloc.page_size":           u(unsafe.Offsetof(mem.U)) + 8,
		"struct hl_mem_in.free.handle":               u(unsafe.Offsetof(mem.U)),
		"struct hl_mem_in.map_device.hint_addr":      u(unsafe.Offsetof(mem.U)),
		"struct hl_mem_in.map_device.handle":         u(unsafe.Offsetof(mem.U)) + 8,
		"struct hl_mem_in.map_host.host_virt_addr":   u(unsafe.Offsetof(mem.U)),
		"struct hl_mem_in.map_host.hint_addr":        u(unsafe.Offsetof(mem.U)) + 8,
		"struct hl_mem_in.map_host.mem_size":         u(unsafe.Offsetof(mem.U)) + 16,
		"struct hl_mem_in.unmap.device_virt_addr":    u(unsafe.Offsetof(mem.U)),
		"struct hl_mem_in.export_dmabuf_fd.handle":   u(unsafe.Offsetof(mem.U)),
		"struct hl_mem_in.export_dmabuf_fd.mem_size": u(unsafe.Offsetof(mem.U)) + 8,
		"struct hl_mem_in.op":                        u(unsafe.Offsetof(mem.Op)),
		"struct hl_mem_in.flags":                     u(unsafe.Offsetof(mem.Flags)),
		"struct hl_mem_in.ctx_id":                    u(unsafe.Offsetof(mem.CtxID)),
		"struct hl_mem_in.num_of_elements":           u(unsafe.Offsetof(mem.NumOfElements)),
		"struct hl_mem_out.device_virt_addr":         u(unsafe.Offsetof(mem.U)),
		"struct hl_mem_out.handle":                   u(unsafe.Offsetof(mem.U)),
		"struct hl_mem_out.fd":                       u(unsafe.Offsetof(mem.U)),
		"sizeof struct hl_mem_in_export_new":         u(unsafe.Sizeof(mem)),
		"struct hl_mem_in_export_new.addr":           u(unsafe.Offsetof(mem.U)),
		"struct hl_mem_in_export_new.mem_size":       u(unsafe.Offsetof(mem.U)) + 8,
		"struct hl_mem_in_export_new.offset":         u(unsafe.Offsetof(mem.U)) + 16,
		"struct hl_mem_in_export_new.op":             u(unsafe.Offsetof(mem.Op)),
		"struct hl_mem_in_export_new.flags":          u(unsafe.Offsetof(mem.Flags)),

		"sizeof union hl_cb_args":    u(unsafe.Sizeof(cb)),
		"struct hl_cb_in.cb_handle":  u(unsafe.Offsetof(cb.Handle)),
		"struct hl_cb_in.op":         u(unsafe.Offsetof(cb.Op)),
		"struct hl_cb_in.cb_size":    u(unsafe.Offsetof(cb.CBSize)),
		"struct hl_cb_in.ctx_id":     u(unsafe.Offsetof(cb.CtxID)),
		"struct hl_cb_in.flags":      u(unsafe.Offsetof(cb.Flags)),
		"struct hl_cb_out.cb_handle": u(unsafe.Offsetof(cb.Handle)),
		"struct hl_cb_out.usage_cnt": u(unsafe.Offsetof(cb.Handle)),
		"struct hl_cb_out.device_va": u(unsafe.Offsetof(cb.Handle)),

		"sizeof struct hl_cs_chunk":                    u(unsafe.Sizeof(chunk)),
		"struct hl_cs_chunk.cb_handle":                 u(unsafe.Offsetof(chunk.CBHandle)),
		"struct hl_cs_chunk.queue_index":               u(unsafe.Offsetof(chunk.QueueIndex)),
		"struct hl_cs_chunk.cb_size":                   u(unsafe.Offsetof(chunk.CBSize)),
		"struct hl_cs_chunk.cs_chunk_flags":            u(unsafe.Offsetof(chunk.Flags)),
		"struct hl_cs_chunk.collective_engine_id":      u(unsafe.Offsetof(chunk.CollectiveEngineID)),
		"struct hl_cs_chunk.pad":                       u(unsafe.Offsetof(chunk.Pad)),
		"sizeof union hl_cs_args":                      u(unsafe.Sizeof(csA)),
		"sizeof struct hl_cs_in":                       u(unsafe.Sizeof(csIn)),
		"struct hl_cs_in.chunks_restore":               u(unsafe.Offsetof(csIn.ChunksRestore)),
		"struct hl_cs_in.chunks_execute":               u(unsafe.Offsetof(csIn.ChunksExecute)),
		"struct hl_cs_in.seq":                          u(unsafe.Offsetof(csIn.Seq)),
		"struct hl_cs_in.num_chunks_restore":           u(unsafe.Offsetof(csIn.NumChunksRestore)),
		"struct hl_cs_in.num_chunks_execute":           u(unsafe.Offsetof(csIn.NumChunksExecute)),
		"struct hl_cs_in.timeout":                      u(unsafe.Offsetof(csIn.Timeout)),
		"struct hl_cs_in.cs_flags":                     u(unsafe.Offsetof(csIn.CSFlags)),
		"struct hl_cs_in.ctx_id":                       u(unsafe.Offsetof(csIn.CtxID)),
		"struct hl_cs_in.pad":                          u(unsafe.Offsetof(csIn.Pad)),
		"sizeof struct hl_cs_out":                      u(unsafe.Sizeof(csOut)),
		"struct hl_cs_out.seq":                         u(unsafe.Offsetof(csOut.Seq)),
		"struct hl_cs_out.status":                      u(unsafe.Offsetof(csOut.Status)),
		"struct hl_cs_out.sob_base_addr_offset":        u(unsafe.Offsetof(csOut.SobBaseAddrOffset)),
		"struct hl_cs_out.sob_count_before_submission": u(unsafe.Offsetof(csOut.SobCountBeforeSubmission)),
		"struct hl_cs_out.pad":                         u(unsafe.Offsetof(csOut.Pad)),

		"sizeof union hl_wait_cs_args":              u(unsafe.Sizeof(wA)),
		"sizeof struct hl_wait_cs_in":               u(unsafe.Sizeof(wIn)),
		"struct hl_wait_cs_in.seq":                  u(unsafe.Offsetof(wIn.Seq)),
		"struct hl_wait_cs_in.timeout_us":           u(unsafe.Offsetof(wIn.TimeoutUs)),
		"struct hl_wait_cs_in.ctx_id":               u(unsafe.Offsetof(wIn.CtxID)),
		"struct hl_wait_cs_in.flags":                u(unsafe.Offsetof(wIn.Flags)),
		"struct hl_wait_cs_in.interrupt_timeout_us": u(unsafe.Offsetof(wIn.InterruptTimeoutUs)),
		"struct hl_wait_cs_in.cq_counters_offset":   u(unsafe.Offsetof(wIn.CqCountersOffset)),
		"struct hl_wait_cs_in.timestamp_handle":     u(unsafe.Offsetof(wIn.TimestampHandle)),
		"struct hl_wait_cs_in.timestamp_offset":     u(unsafe.Offsetof(wIn.TimestampOffset)),
		"sizeof struct hl_wait_cs_out":              u(unsafe.Sizeof(wOut)),
		"struct hl_wait_cs_out.status":              u(unsafe.Offsetof(wOut.Status)),
		"struct hl_wait_cs_out.flags":               u(unsafe.Offsetof(wOut.Flags)),
		"struct hl_wait_cs_out.timestamp_nsec":      u(unsafe.Offsetof(wOut.TimestampNsec)),
		"struct hl_wait_cs_out.cs_completion_map":   u(unsafe.Offsetof(wOut.CsCompletionMap)),
		"struct hl_wait_cs_out.pad":                 u(unsafe.Offsetof(wOut.Pad)),

		"HL_IOCTL_INFO":        u(hlsys.LegacyInfo),
		"HL_IOCTL_CB":          u(hlsys.LegacyCB),
		"HL_IOCTL_CS":          u(hlsys.LegacyCS),
		"HL_IOCTL_WAIT_CS":     u(hlsys.LegacyWaitCS),
		"HL_IOCTL_MEMORY":      u(hlsys.LegacyMemory),
		"HL_IOCTL_DEBUG":       u(hlsys.LegacyDebug),
		"DRM_IOCTL_HL_INFO":    u(hlsys.AccelInfo),
		"DRM_IOCTL_HL_CB":      u(hlsys.AccelCB),
		"DRM_IOCTL_HL_CS":      u(hlsys.AccelCS),
		"DRM_IOCTL_HL_WAIT_CS": u(hlsys.AccelWaitCS),
		"DRM_IOCTL_HL_MEMORY":  u(hlsys.AccelMemory),
		"DRM_IOCTL_HL_DEBUG":   u(hlsys.AccelDebug),

		"HL_INFO_HW_IP_INFO":              hlsys.InfoHwIPInfo,
		"HL_INFO_DRAM_USAGE":              hlsys.InfoDramUsage,
		"HL_INFO_DEVICE_STATUS":           hlsys.InfoDeviceStatus,
		"HL_INFO_REGISTER_EVENTFD":        hlsys.InfoRegisterEventFD,
		"HL_INFO_UNREGISTER_EVENTFD":      hlsys.InfoUnregisterEventFD,
		"HL_INFO_GET_EVENTS":              hlsys.InfoGetEvents,
		"HL_MEM_OP_ALLOC":                 hlsys.MemOpAlloc,
		"HL_MEM_OP_FREE":                  hlsys.MemOpFree,
		"HL_MEM_OP_MAP":                   hlsys.MemOpMap,
		"HL_MEM_OP_UNMAP":                 hlsys.MemOpUnmap,
		"HL_MEM_OP_EXPORT_DMABUF_FD":      hlsys.MemOpExportDMABuf,
		"HL_MEM_USERPTR":                  hlsys.MemUserPtr,
		"HL_MEM_CONTIGUOUS":               hlsys.MemContiguous,
		"HL_MEM_SHARED":                   hlsys.MemShared,
		"HL_CB_OP_CREATE":                 hlsys.CBOpCreate,
		"HL_CB_OP_DESTROY":                hlsys.CBOpDestroy,
		"HL_CB_OP_INFO":                   hlsys.CBOpInfo,
		"HL_CB_FLAGS_MAP":                 hlsys.CBFlagsMap,
		"HL_CB_FLAGS_GET_DEVICE_VA":       hlsys.CBFlagsGetDeviceVA,
		"HL_MAX_CB_SIZE":                  hlsys.MaxCBSize,
		"HL_MAX_JOBS_PER_CS":              hlsys.MaxJobsPerCS,
		"HL_CS_CHUNK_FLAGS_USER_ALLOC_CB": hlsys.CSChunkFlagsUserAllocCB,
		"HL_CS_FLAGS_CUSTOM_TIMEOUT":      hlsys.CSFlagsCustomTimeout,
		"HL_CS_FLAGS_TIMESTAMP":           hlsys.CSFlagsTimestamp,
		"HL_CS_STATUS_SUCCESS":            hlsys.CSStatusSuccess,
		"HL_WAIT_CS_STATUS_COMPLETED":     hlsys.WaitCSStatusCompleted,
		"HL_WAIT_CS_STATUS_BUSY":          hlsys.WaitCSStatusBusy,
		"HL_WAIT_CS_STATUS_TIMEDOUT":      hlsys.WaitCSStatusTimedOut,
		"HL_WAIT_CS_STATUS_ABORTED":       hlsys.WaitCSStatusAborted,
		"HL_WAIT_CS_STATUS_FLAG_GONE":     hlsys.WaitCSStatusFlagGone,
		"HL_DEVICE_STATUS_OPERATIONAL":    hlsys.DeviceStatusOperational,
		"HL_DEVICE_STATUS_IN_RESET":       hlsys.DeviceStatusInReset,
		"HL_DEVICE_STATUS_MALFUNCTION":    hlsys.DeviceStatusMalfunction,
		"HL_NOTIFIER_EVENT_DEVICE_RESET":  hlsys.NotifierDeviceReset,
		"HL_NOTIFIER_EVENT_CS_TIMEOUT":    hlsys.NotifierCSTimeout,
		"GAUDI_QUEUE_ID_DMA_0_0":          hlsys.Gaudi1QueueDMA0_0,
		"GAUDI_QUEUE_ID_DMA_1_0":          hlsys.Gaudi1QueueDMA1_0,
		"GAUDI_QUEUE_ID_CPU_PQ":           hlsys.Gaudi1QueueCPUPQ,
		"GAUDI2_QUEUE_ID_PDMA_0_0":        hlsys.Gaudi2QueuePDMA0_0,
		"GAUDI2_QUEUE_ID_PDMA_1_0":        hlsys.Gaudi2QueuePDMA1_0,
		"GAUDI2_QUEUE_ID_CPU_PQ":          hlsys.Gaudi2QueueCPUPQ,
	}
	// hw_ip_info: the 6.1 header names the same bytes as the Go struct up to
	// device_mem_alloc_default_page_size; the newest header renames the tail.
	for _, f := range []struct {
		c string
		o uintptr
	}{
		{"sram_base_address", unsafe.Offsetof(hw.SramBaseAddress)},
		{"dram_base_address", unsafe.Offsetof(hw.DramBaseAddress)},
		{"dram_size", unsafe.Offsetof(hw.DramSize)},
		{"sram_size", unsafe.Offsetof(hw.SramSize)},
		{"num_of_events", unsafe.Offsetof(hw.NumOfEvents)},
		{"device_id", unsafe.Offsetof(hw.DeviceID)},
		{"module_id", unsafe.Offsetof(hw.ModuleID)},
		{"decoder_enabled_mask", unsafe.Offsetof(hw.DecoderEnabledMask)},
		{"first_available_interrupt_id", unsafe.Offsetof(hw.FirstAvailableInterruptID)},
		{"server_type", unsafe.Offsetof(hw.ServerType)},
		{"cpld_version", unsafe.Offsetof(hw.CpldVersion)},
		{"psoc_pci_pll_nr", unsafe.Offsetof(hw.PsocPciPllNr)},
		{"psoc_pci_pll_nf", unsafe.Offsetof(hw.PsocPciPllNf)},
		{"psoc_pci_pll_od", unsafe.Offsetof(hw.PsocPciPllOd)},
		{"psoc_pci_pll_div_factor", unsafe.Offsetof(hw.PsocPciPllDivFactor)},
		{"tpc_enabled_mask", unsafe.Offsetof(hw.TpcEnabledMask)},
		{"dram_enabled", unsafe.Offsetof(hw.DramEnabled)},
		{"security_enabled", unsafe.Offsetof(hw.SecurityEnabled)},
		{"mme_master_slave_mode", unsafe.Offsetof(hw.MmeMasterSlaveMode)},
		{"cpucp_version", unsafe.Offsetof(hw.CpucpVersion)},
		{"card_name", unsafe.Offsetof(hw.CardName)},
		{"tpc_enabled_mask_ext", unsafe.Offsetof(hw.TpcEnabledMaskExt)},
		{"dram_page_size", unsafe.Offsetof(hw.DramPageSize)},
		{"edma_enabled_mask", unsafe.Offsetof(hw.EdmaEnabledMask)},
		{"number_of_user_interrupts", unsafe.Offsetof(hw.NumberOfUserInterrupts)},
		{"pad2", unsafe.Offsetof(hw.Reserved1)},
		{"reserved4", unsafe.Offsetof(hw.Reserved3)},
		{"device_mem_alloc_default_page_size", unsafe.Offsetof(hw.DeviceMemAllocDefaultPageSize)},
	} {
		m["struct hl_info_hw_ip_info."+f.c] = u(f.o)
	}
	for _, f := range []struct {
		c string
		o uintptr
	}{
		{"reserved1", unsafe.Offsetof(hw.Reserved1)},
		{"reserved2", unsafe.Offsetof(hw.Reserved2)},
		{"reserved3", unsafe.Offsetof(hw.Reserved3)},
		{"device_mem_alloc_default_page_size", unsafe.Offsetof(hw.DeviceMemAllocDefaultPageSize)},
		{"reserved4", unsafe.Offsetof(hw.Reserved4)},
		{"reserved5", unsafe.Offsetof(hw.Reserved5)},
		{"reserved6", unsafe.Offsetof(hw.Reserved6)},
		{"reserved7", unsafe.Offsetof(hw.Reserved7)},
		{"revision_id", unsafe.Offsetof(hw.RevisionID)},
		{"tpc_interrupt_id", unsafe.Offsetof(hw.TpcInterruptID)},
		{"rotator_enabled_mask", unsafe.Offsetof(hw.RotatorEnabledMask)},
		{"reserved9", unsafe.Offsetof(hw.Reserved9)},
		{"engine_core_interrupt_reg_addr", unsafe.Offsetof(hw.EngineCoreInterruptRegAddr)},
		{"reserved_dram_size", unsafe.Offsetof(hw.ReservedDramSize)},
	} {
		m["struct hl_info_hw_ip_info_new."+f.c] = u(f.o)
	}
	return m
}

// TestLayoutsMatchKernelHeader compares every size, offset and constant
// hlsys uses with what the C compiler computes from the kernel header.
func TestLayoutsMatchKernelHeader(t *testing.T) {
	c := Header()
	g := goSide()
	require.NotEmpty(t, c)
	for k, want := range c {
		got, ok := g[k]
		if assert.Truef(t, ok, "header entry %q has no Go counterpart", k) {
			assert.Equalf(t, want, got, "%s: header says %#x, hlsys says %#x", k, want, got)
		}
	}
	for k := range g {
		_, ok := c[k]
		assert.Truef(t, ok, "Go entry %q is not checked against the header", k)
	}
	// Cross-check the documented request numbers too.
	assert.Equal(t, uint64(0xC0184801), uint64(hlsys.LegacyInfo))
	assert.Equal(t, uint64(0xC0186440), uint64(hlsys.AccelInfo))
	assert.Equal(t, uint64(0xC0286444), uint64(hlsys.AccelMemory))
}

// TestDecode checks that request numbers decode to their numbering and the
// two numberings never collide.
func TestDecode(t *testing.T) {
	for _, n := range []hlsys.Numbering{hlsys.Legacy, hlsys.Accel} {
		for nr := 0; nr < 6; nr++ {
			gn, gnr, ok := hlsys.Decode(n.Request(nr))
			require.True(t, ok)
			require.Equal(t, n, gn)
			require.Equal(t, nr, gnr)
		}
	}
	_, _, ok := hlsys.Decode(0x1234)
	require.False(t, ok)
}
