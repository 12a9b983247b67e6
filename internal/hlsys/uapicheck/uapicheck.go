// Package uapicheck reads sizes, field offsets and ioctl numbers from the
// kernel's habanalabs uAPI header with cgo, so that a test can compare them
// with the Go layouts in package hlsys. It exists only for that test; no
// other package imports it.
//
// The kernel 6.1 header (/usr/include/misc/habanalabs.h, from Debian's
// linux-libc-dev) is the ground truth. The fields that only the newest
// header has (the 304-byte hl_info_hw_ip_info tail and the {addr, size,
// offset} export form) are declared below as a C mirror of that header and
// checked the same way, with the 6.1 prefix checked against the real one.
package uapicheck

/*
#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>
#include <linux/ioctl.h>
#include <misc/habanalabs.h>

// Newest-header layouts that the 6.1 header lacks (include/uapi/drm/habanalabs_accel.h).
struct hl_info_hw_ip_info_new {
	__u64 sram_base_address;
	__u64 dram_base_address;
	__u64 dram_size;
	__u32 sram_size;
	__u32 num_of_events;
	__u32 device_id;
	__u32 module_id;
	__u32 decoder_enabled_mask;
	__u16 first_available_interrupt_id;
	__u16 server_type;
	__u32 cpld_version;
	__u32 psoc_pci_pll_nr;
	__u32 psoc_pci_pll_nf;
	__u32 psoc_pci_pll_od;
	__u32 psoc_pci_pll_div_factor;
	__u8 tpc_enabled_mask;
	__u8 dram_enabled;
	__u8 security_enabled;
	__u8 mme_master_slave_mode;
	__u8 cpucp_version[HL_INFO_VERSION_MAX_LEN];
	__u8 card_name[HL_INFO_CARD_NAME_MAX_LEN];
	__u64 tpc_enabled_mask_ext;
	__u64 dram_page_size;
	__u32 edma_enabled_mask;
	__u16 number_of_user_interrupts;
	__u8 reserved1;
	__u8 reserved2;
	__u64 reserved3;
	__u64 device_mem_alloc_default_page_size;
	__u64 reserved4;
	__u64 reserved5;
	__u32 reserved6;
	__u8 reserved7;
	__u8 revision_id;
	__u16 tpc_interrupt_id;
	__u32 rotator_enabled_mask;
	__u32 reserved9;
	__u64 engine_core_interrupt_reg_addr;
	__u64 reserved_dram_size;
};

struct hl_mem_in_export_new {
	__u64 addr;
	__u64 mem_size;
	__u64 offset;
	__u32 op;
	__u32 flags;
	__u32 ctx_id;
	__u32 num_of_elements;
};

// drm/drm.h is not part of Debian's linux-libc-dev (libdrm-dev ships it);
// these are its two definitions that DRM_IOCTL_HL_* use.
#define HLCHK_DRM_IOCTL_BASE 'd'
#define HLCHK_DRM_COMMAND_BASE 0x40
#define HLCHK_DRM_IOCTL_HL(n, T) _IOWR(HLCHK_DRM_IOCTL_BASE, HLCHK_DRM_COMMAND_BASE + (n), T)

struct hlchk_entry { const char *name; unsigned long long value; };

#define SZ(T) { "sizeof " #T, sizeof(T) }
#define OFF(T, f) { #T "." #f, offsetof(T, f) }

static const struct hlchk_entry hlchk_table[] = {
	SZ(struct hl_info_args),
	OFF(struct hl_info_args, return_pointer),
	OFF(struct hl_info_args, return_size),
	OFF(struct hl_info_args, op),
	OFF(struct hl_info_args, dcore_id),
	OFF(struct hl_info_args, pad),

	SZ(struct hl_info_hw_ip_info),
	OFF(struct hl_info_hw_ip_info, sram_base_address),
	OFF(struct hl_info_hw_ip_info, dram_base_address),
	OFF(struct hl_info_hw_ip_info, dram_size),
	OFF(struct hl_info_hw_ip_info, sram_size),
	OFF(struct hl_info_hw_ip_info, num_of_events),
	OFF(struct hl_info_hw_ip_info, device_id),
	OFF(struct hl_info_hw_ip_info, module_id),
	OFF(struct hl_info_hw_ip_info, decoder_enabled_mask),
	OFF(struct hl_info_hw_ip_info, first_available_interrupt_id),
	OFF(struct hl_info_hw_ip_info, server_type),
	OFF(struct hl_info_hw_ip_info, cpld_version),
	OFF(struct hl_info_hw_ip_info, psoc_pci_pll_nr),
	OFF(struct hl_info_hw_ip_info, psoc_pci_pll_nf),
	OFF(struct hl_info_hw_ip_info, psoc_pci_pll_od),
	OFF(struct hl_info_hw_ip_info, psoc_pci_pll_div_factor),
	OFF(struct hl_info_hw_ip_info, tpc_enabled_mask),
	OFF(struct hl_info_hw_ip_info, dram_enabled),
	OFF(struct hl_info_hw_ip_info, security_enabled),
	OFF(struct hl_info_hw_ip_info, mme_master_slave_mode),
	OFF(struct hl_info_hw_ip_info, cpucp_version),
	OFF(struct hl_info_hw_ip_info, card_name),
	OFF(struct hl_info_hw_ip_info, tpc_enabled_mask_ext),
	OFF(struct hl_info_hw_ip_info, dram_page_size),
	OFF(struct hl_info_hw_ip_info, edma_enabled_mask),
	OFF(struct hl_info_hw_ip_info, number_of_user_interrupts),
	OFF(struct hl_info_hw_ip_info, pad2),
	OFF(struct hl_info_hw_ip_info, reserved4),
	OFF(struct hl_info_hw_ip_info, device_mem_alloc_default_page_size),

	SZ(struct hl_info_hw_ip_info_new),
	OFF(struct hl_info_hw_ip_info_new, reserved1),
	OFF(struct hl_info_hw_ip_info_new, reserved2),
	OFF(struct hl_info_hw_ip_info_new, reserved3),
	OFF(struct hl_info_hw_ip_info_new, device_mem_alloc_default_page_size),
	OFF(struct hl_info_hw_ip_info_new, reserved4),
	OFF(struct hl_info_hw_ip_info_new, reserved5),
	OFF(struct hl_info_hw_ip_info_new, reserved6),
	OFF(struct hl_info_hw_ip_info_new, reserved7),
	OFF(struct hl_info_hw_ip_info_new, revision_id),
	OFF(struct hl_info_hw_ip_info_new, tpc_interrupt_id),
	OFF(struct hl_info_hw_ip_info_new, rotator_enabled_mask),
	OFF(struct hl_info_hw_ip_info_new, reserved9),
	OFF(struct hl_info_hw_ip_info_new, engine_core_interrupt_reg_addr),
	OFF(struct hl_info_hw_ip_info_new, reserved_dram_size),

	SZ(struct hl_info_dram_usage),
	OFF(struct hl_info_dram_usage, dram_free_mem),
	OFF(struct hl_info_dram_usage, ctx_dram_mem),
	SZ(struct hl_info_device_status),
	OFF(struct hl_info_device_status, status),
	OFF(struct hl_info_device_status, pad),

	SZ(union hl_mem_args),
	SZ(struct hl_mem_in),
	OFF(struct hl_mem_in, alloc.mem_size),
	OFF(struct hl_mem_in, alloc.page_size),
	OFF(struct hl_mem_in, free.handle),
	OFF(struct hl_mem_in, map_device.hint_addr),
	OFF(struct hl_mem_in, map_device.handle),
	OFF(struct hl_mem_in, map_host.host_virt_addr),
	OFF(struct hl_mem_in, map_host.hint_addr),
	OFF(struct hl_mem_in, map_host.mem_size),
	OFF(struct hl_mem_in, unmap.device_virt_addr),
	OFF(struct hl_mem_in, export_dmabuf_fd.handle),
	OFF(struct hl_mem_in, export_dmabuf_fd.mem_size),
	OFF(struct hl_mem_in, op),
	OFF(struct hl_mem_in, flags),
	OFF(struct hl_mem_in, ctx_id),
	OFF(struct hl_mem_in, num_of_elements),
	OFF(struct hl_mem_out, device_virt_addr),
	OFF(struct hl_mem_out, handle),
	OFF(struct hl_mem_out, fd),
	SZ(struct hl_mem_in_export_new),
	OFF(struct hl_mem_in_export_new, addr),
	OFF(struct hl_mem_in_export_new, mem_size),
	OFF(struct hl_mem_in_export_new, offset),
	OFF(struct hl_mem_in_export_new, op),
	OFF(struct hl_mem_in_export_new, flags),

	SZ(union hl_cb_args),
	OFF(struct hl_cb_in, cb_handle),
	OFF(struct hl_cb_in, op),
	OFF(struct hl_cb_in, cb_size),
	OFF(struct hl_cb_in, ctx_id),
	OFF(struct hl_cb_in, flags),
	OFF(struct hl_cb_out, cb_handle),
	OFF(struct hl_cb_out, usage_cnt),
	OFF(struct hl_cb_out, device_va),

	SZ(struct hl_cs_chunk),
	OFF(struct hl_cs_chunk, cb_handle),
	OFF(struct hl_cs_chunk, queue_index),
	OFF(struct hl_cs_chunk, cb_size),
	OFF(struct hl_cs_chunk, cs_chunk_flags),
	OFF(struct hl_cs_chunk, collective_engine_id),
	OFF(struct hl_cs_chunk, pad),
	SZ(union hl_cs_args),
	SZ(struct hl_cs_in),
	OFF(struct hl_cs_in, chunks_restore),
	OFF(struct hl_cs_in, chunks_execute),
	OFF(struct hl_cs_in, seq),
	OFF(struct hl_cs_in, num_chunks_restore),
	OFF(struct hl_cs_in, num_chunks_execute),
	OFF(struct hl_cs_in, timeout),
	OFF(struct hl_cs_in, cs_flags),
	OFF(struct hl_cs_in, ctx_id),
	OFF(struct hl_cs_in, pad),
	SZ(struct hl_cs_out),
	OFF(struct hl_cs_out, seq),
	OFF(struct hl_cs_out, status),
	OFF(struct hl_cs_out, sob_base_addr_offset),
	OFF(struct hl_cs_out, sob_count_before_submission),
	OFF(struct hl_cs_out, pad),

	SZ(union hl_wait_cs_args),
	SZ(struct hl_wait_cs_in),
	OFF(struct hl_wait_cs_in, seq),
	OFF(struct hl_wait_cs_in, timeout_us),
	OFF(struct hl_wait_cs_in, ctx_id),
	OFF(struct hl_wait_cs_in, flags),
	OFF(struct hl_wait_cs_in, interrupt_timeout_us),
	OFF(struct hl_wait_cs_in, cq_counters_offset),
	OFF(struct hl_wait_cs_in, timestamp_handle),
	OFF(struct hl_wait_cs_in, timestamp_offset),
	SZ(struct hl_wait_cs_out),
	OFF(struct hl_wait_cs_out, status),
	OFF(struct hl_wait_cs_out, flags),
	OFF(struct hl_wait_cs_out, timestamp_nsec),
	OFF(struct hl_wait_cs_out, cs_completion_map),
	OFF(struct hl_wait_cs_out, pad),

	{ "HL_IOCTL_INFO", HL_IOCTL_INFO },
	{ "HL_IOCTL_CB", HL_IOCTL_CB },
	{ "HL_IOCTL_CS", HL_IOCTL_CS },
	{ "HL_IOCTL_WAIT_CS", HL_IOCTL_WAIT_CS },
	{ "HL_IOCTL_MEMORY", HL_IOCTL_MEMORY },
	{ "HL_IOCTL_DEBUG", HL_IOCTL_DEBUG },
	{ "DRM_IOCTL_HL_INFO", HLCHK_DRM_IOCTL_HL(0, struct hl_info_args) },
	{ "DRM_IOCTL_HL_CB", HLCHK_DRM_IOCTL_HL(1, union hl_cb_args) },
	{ "DRM_IOCTL_HL_CS", HLCHK_DRM_IOCTL_HL(2, union hl_cs_args) },
	{ "DRM_IOCTL_HL_WAIT_CS", HLCHK_DRM_IOCTL_HL(3, union hl_wait_cs_args) },
	{ "DRM_IOCTL_HL_MEMORY", HLCHK_DRM_IOCTL_HL(4, union hl_mem_args) },
	{ "DRM_IOCTL_HL_DEBUG", HLCHK_DRM_IOCTL_HL(5, struct hl_debug_args) },

	{ "HL_INFO_HW_IP_INFO", HL_INFO_HW_IP_INFO },
	{ "HL_INFO_DRAM_USAGE", HL_INFO_DRAM_USAGE },
	{ "HL_INFO_DEVICE_STATUS", HL_INFO_DEVICE_STATUS },
	{ "HL_INFO_REGISTER_EVENTFD", HL_INFO_REGISTER_EVENTFD },
	{ "HL_INFO_UNREGISTER_EVENTFD", HL_INFO_UNREGISTER_EVENTFD },
	{ "HL_INFO_GET_EVENTS", HL_INFO_GET_EVENTS },
	{ "HL_MEM_OP_ALLOC", HL_MEM_OP_ALLOC },
	{ "HL_MEM_OP_FREE", HL_MEM_OP_FREE },
	{ "HL_MEM_OP_MAP", HL_MEM_OP_MAP },
	{ "HL_MEM_OP_UNMAP", HL_MEM_OP_UNMAP },
	{ "HL_MEM_OP_EXPORT_DMABUF_FD", HL_MEM_OP_EXPORT_DMABUF_FD },
	{ "HL_MEM_USERPTR", HL_MEM_USERPTR },
	{ "HL_MEM_CONTIGUOUS", HL_MEM_CONTIGUOUS },
	{ "HL_MEM_SHARED", HL_MEM_SHARED },
	{ "HL_CB_OP_CREATE", HL_CB_OP_CREATE },
	{ "HL_CB_OP_DESTROY", HL_CB_OP_DESTROY },
	{ "HL_CB_OP_INFO", HL_CB_OP_INFO },
	{ "HL_CB_FLAGS_MAP", HL_CB_FLAGS_MAP },
	{ "HL_CB_FLAGS_GET_DEVICE_VA", HL_CB_FLAGS_GET_DEVICE_VA },
	{ "HL_MAX_CB_SIZE", HL_MAX_CB_SIZE },
	{ "HL_MAX_JOBS_PER_CS", HL_MAX_JOBS_PER_CS },
	{ "HL_CS_CHUNK_FLAGS_USER_ALLOC_CB", HL_CS_CHUNK_FLAGS_USER_ALLOC_CB },
	{ "HL_CS_FLAGS_CUSTOM_TIMEOUT", HL_CS_FLAGS_CUSTOM_TIMEOUT },
	{ "HL_CS_FLAGS_TIMESTAMP", HL_CS_FLAGS_TIMESTAMP },
	{ "HL_CS_STATUS_SUCCESS", HL_CS_STATUS_SUCCESS },
	{ "HL_WAIT_CS_STATUS_COMPLETED", HL_WAIT_CS_STATUS_COMPLETED },
	{ "HL_WAIT_CS_STATUS_BUSY", HL_WAIT_CS_STATUS_BUSY },
	{ "HL_WAIT_CS_STATUS_TIMEDOUT", HL_WAIT_CS_STATUS_TIMEDOUT },
	{ "HL_WAIT_CS_STATUS_ABORTED", HL_WAIT_CS_STATUS_ABORTED },
	{ "HL_WAIT_CS_STATUS_FLAG_GONE", HL_WAIT_CS_STATUS_FLAG_GONE },
	{ "HL_DEVICE_STATUS_OPERATIONAL", HL_DEVICE_STATUS_OPERATIONAL },
	{ "HL_DEVICE_STATUS_IN_RESET", HL_DEVICE_STATUS_IN_RESET },
	{ "HL_DEVICE_STATUS_MALFUNCTION", HL_DEVICE_STATUS_MALFUNCTION },
	{ "HL_NOTIFIER_EVENT_DEVICE_RESET", HL_NOTIFIER_EVENT_DEVICE_RESET },
	{ "HL_NOTIFIER_EVENT_CS_TIMEOUT", HL_NOTIFIER_EVENT_CS_TIMEOUT },
	{ "GAUDI_QUEUE_ID_DMA_0_0", GAUDI_QUEUE_ID_DMA_0_0 },
	{ "GAUDI_QUEUE_ID_DMA_1_0", GAUDI_QUEUE_ID_DMA_1_0 },
	{ "GAUDI_QUEUE_ID_CPU_PQ", GAUDI_QUEUE_ID_CPU_PQ },
	{ "GAUDI2_QUEUE_ID_PDMA_0_0", GAUDI2_QUEUE_ID_PDMA_0_0 },
	{ "GAUDI2_QUEUE_ID_PDMA_1_0", GAUDI2_QUEUE_ID_PDMA_1_0 },
	{ "GAUDI2_QUEUE_ID_CPU_PQ", GAUDI2_QUEUE_ID_CPU_PQ },
};

static int hlchk_count(void) { return sizeof(hlchk_table) / sizeof(hlchk_table[0]); }
static const char *hlchk_name(int i) { return hlchk_table[i].name; }
static unsigned long long hlchk_value(int i) { return hlchk_table[i].value; }
*/
import "C"

// Header returns every size, offset ("struct x.field") and constant the
// test checks, as the C compiler sees them in the kernel header.
func Header() map[string]uint64 {
	n := int(C.hlchk_count())
	m := make(map[string]uint64, n)
	for i := 0; i < n; i++ {
		m[C.GoString(C.hlchk_name(C.int(i)))] = uint64(C.hlchk_value(C.int(i)))
	}
	return m
}
