package hlsim

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys/uapicheck"
)

// uapiValue is one value of the emulator's own (values hlsys does not
// export) and the C expression the uAPI header gives for it.
type uapiValue struct {
	c    string
	val  uint64
	only string // "6.1" or "DRM": the one header generation that has it; "" both
}

// uapiValues are the emulator's values of the uAPI: INFO ops it knows by
// number, the INFO outputs it writes byte by byte, CS flags, queue ids.
// What hlsys exports is checked by internal/hlsys/uapicheck.
func uapiValues() []uapiValue {
	v := []uapiValue{
		{c: "HL_INFO_DEVICE_UTILIZATION", val: infoDeviceUtilization},
		{c: "HL_INFO_HW_EVENTS_AGGREGATE", val: infoHwEventsAggregate},
		{c: "HL_INFO_CLK_RATE", val: infoClkRate},
		{c: "HL_INFO_TIME_SYNC", val: infoTimeSync},
		{c: "HL_INFO_CS_COUNTERS", val: infoCSCounters},
		{c: "HL_INFO_CLK_THROTTLE_REASON", val: infoClkThrottleReason},
		{c: "HL_INFO_SYNC_MANAGER", val: infoSyncManager},
		{c: "HL_INFO_LAST_ERR_OPEN_DEV_TIME", val: infoLastErrOpenDevTime},
		{c: "HL_INFO_CS_TIMEOUT_EVENT", val: infoCSTimeoutEvent},
		{c: "HL_INFO_RAZWI_EVENT", val: infoRazwiEvent},
		{c: "HL_INFO_DEV_MEM_ALLOC_PAGE_SIZES", val: infoDevMemAllocPageSizes},
		{c: "HL_INFO_UNDEFINED_OPCODE_EVENT", val: infoUndefinedOpcodeEvent},
		{c: "HL_INFO_PAGE_FAULT_EVENT", val: infoPageFaultEvent, only: "DRM"},
		{c: "HL_INFO_USER_MAPPINGS", val: infoUserMappings, only: "DRM"},
		{c: "HL_INFO_HW_ERR_EVENT", val: infoHwErrEvent, only: "DRM"},
		{c: "HL_INFO_FW_ERR_EVENT", val: infoFwErrEvent, only: "DRM"},
		{c: "HL_INFO_USER_ENGINE_ERR_EVENT", val: infoUserEngineErrEvent, only: "DRM"},
		{c: "HL_INFO_ENGINE_STATUS", val: infoLastKnownOp61, only: "6.1"},
		{c: "HL_INFO_DEV_SIGNED", val: infoLastKnownOpNew, only: "DRM"},
		{c: "HL_NOTIFIER_EVENT_PAGE_FAULT", val: notifierPageFault, only: "DRM"},

		{c: "sizeof(struct hl_info_hw_idle)", val: sizeofHwIdle, only: "6.1"},
		{c: "sizeof(struct hl_info_hw_idle)", val: sizeofHwIdleN, only: "DRM"},
		{c: "offsetof(struct hl_info_hw_idle, is_idle)", val: 0},
		{c: "FSIZE(struct hl_info_hw_idle, is_idle)", val: 4},
		{c: "offsetof(struct hl_info_hw_idle, busy_engines_mask)", val: hwIdleBusyOff},
		{c: "FSIZE(struct hl_info_hw_idle, busy_engines_mask)", val: 4},
		{c: "sizeof(struct hl_info_reset_count)", val: sizeofResetCount},
		{c: "offsetof(struct hl_info_reset_count, hard_reset_cnt)", val: 0},
		{c: "FSIZE(struct hl_info_reset_count, hard_reset_cnt)", val: 4},
		{c: "sizeof(struct hl_open_stats_info)", val: sizeofOpenStats},
		{c: "offsetof(struct hl_open_stats_info, open_counter)", val: 0},
		{c: "FSIZE(struct hl_open_stats_info, open_counter)", val: 8},
		{c: "offsetof(struct hl_open_stats_info, last_open_period_ms)", val: openStatsPeriodOff},
		{c: "FSIZE(struct hl_open_stats_info, last_open_period_ms)", val: 8},
		{c: "offsetof(struct hl_open_stats_info, is_compute_ctx_active)", val: openStatsActiveOff},
		{c: "FSIZE(struct hl_open_stats_info, is_compute_ctx_active)", val: 1},
		{c: "offsetof(struct hl_open_stats_info, compute_ctx_in_release)", val: openStatsReleaseOff},
		{c: "FSIZE(struct hl_open_stats_info, compute_ctx_in_release)", val: 1},
		{c: "sizeof(struct hl_info_dev_memalloc_page_sizes)", val: sizeofPageSizes},
		{c: "offsetof(struct hl_info_dev_memalloc_page_sizes, page_order_bitmask)", val: 0},

		{c: "HL_CS_FLAGS_COLLECTIVE_WAIT", val: csFlagsCollectiveWait},
		{c: "HL_CS_FLAGS_STAGED_SUBMISSION", val: csFlagsStaged},
		{c: "HL_CS_FLAGS_ENCAP_SIGNALS", val: csFlagsEncapSignals},
		{c: "HL_CS_FLAGS_RESERVE_SIGNALS_ONLY", val: csFlagsReserveSignals},
		{c: "HL_CS_FLAGS_UNRESERVE_SIGNALS_ONLY", val: csFlagsUnreserveSignals},
		{c: "HL_CS_FLAGS_ENGINE_CORE_COMMAND", val: csFlagsEngineCoreCmd},
		{c: "HL_CS_FLAGS_FLUSH_PCI_HBW_WRITES", val: csFlagsFlushPCIHBW, only: "DRM"},
		{c: "HL_CS_FLAGS_ENGINES_COMMAND", val: csFlagsEnginesCmd, only: "DRM"},

		{c: "GAUDI_QUEUE_ID_SIZE", val: g1QueueSize},
		{c: "GAUDI2_QUEUE_ID_PDMA_0_1", val: g2QueuePDMA01},
		{c: "GAUDI2_QUEUE_ID_PDMA_1_0", val: g2QueuePDMA10},
		{c: "GAUDI2_QUEUE_ID_SIZE", val: g2QueueSize},
	}
	for i, name := range []string{"DCORE0_EDMA_0_0", "DCORE0_EDMA_1_0", "DCORE1_EDMA_0_0", "DCORE1_EDMA_1_0",
		"DCORE2_EDMA_0_0", "DCORE2_EDMA_1_0", "DCORE3_EDMA_0_0", "DCORE3_EDMA_1_0"} {
		v = append(v, uapiValue{c: "GAUDI2_QUEUE_ID_" + name, val: uint64(g2EDMAQueueBases[i])})
	}
	return v
}

// TestUAPIValues compares uapiValues with the kernel headers, compiled
// with gcc by uapicheck.Eval: the 6.1 header always, the 6.12 (DRM accel)
// header when uapicheck.EnvNewHeader names it (.ci/run sets it).
func TestUAPIValues(t *testing.T) {
	gens := []uapicheck.Gen{uapicheck.Gen61()}
	if dir := os.Getenv(uapicheck.EnvNewHeader); dir != "" {
		g, err := uapicheck.GenDRM(dir)
		require.NoError(t, err)
		gens = append(gens, g)
	} else {
		t.Logf("%s is unset: the 6.12 header is not checked", uapicheck.EnvNewHeader)
	}
	for _, g := range gens {
		t.Run(g.Name, func(t *testing.T) {
			var vals []uapiValue
			for _, v := range uapiValues() {
				if v.only == "" || (v.only == "DRM") == g.DRM {
					vals = append(vals, v)
				}
			}
			exprs := make([]string, len(vals))
			for i, v := range vals {
				exprs[i] = v.c
			}
			hdr, err := uapicheck.Eval(g, exprs)
			require.NoError(t, err)
			for _, v := range vals {
				assert.Equalf(t, hdr[v.c], v.val, "%s: header %#x, hlsim %#x", v.c, hdr[v.c], v.val)
			}
		})
	}
}
