package dma

import (
	"fmt"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// Model is a Gaudi generation. The zero value is not a valid model.
type Model int

// Supported models.
const (
	// ModelGaudi1 is the first Gaudi: no MMU in front of DRAM (physical
	// DRAM addresses), kernel command buffers on the external PCI DMA
	// queues.
	ModelGaudi1 Model = iota + 1
	// ModelGaudi2 has DRAM behind the device MMU (ALLOC + MAP give a device
	// VA) and takes user command buffers (a device VA) on its queues; of
	// the PCI DMA queues only PDMA_0_0, PDMA_0_1 and PDMA_1_0 are open to
	// users (see queueTable).
	ModelGaudi2
	// ModelGaudi3 is driven like Gaudi2 for memory. It needs Intel's
	// out-of-tree driver, which opens no command queue to users: copies
	// run in direct PDMA mode on user-owned PDMA channels (gaudi3.go), and
	// the queue ids are channel numbers.
	ModelGaudi3
)

// String returns "Gaudi", "Gaudi2" or "Gaudi3".
func (m Model) String() string {
	switch m {
	case ModelGaudi1:
		return "Gaudi"
	case ModelGaudi2:
		return "Gaudi2"
	case ModelGaudi3:
		return "Gaudi3"
	}
	return fmt.Sprintf("Model(%d)", int(m))
}

// hasDeviceMMU reports whether device memory is reached through the device
// MMU (ALLOC handle + MAP VA) rather than by physical address.
func (m Model) hasDeviceMMU() bool { return m != ModelGaudi1 }

// userCB reports whether the model's DMA queues take user command buffers
// (a device VA plus CSChunkFlagsUserAllocCB) instead of kernel CB handles.
func (m Model) userCB() bool { return m == ModelGaudi2 }

// direct reports whether the model copies in direct PDMA mode (Gaudi3):
// CBs are plain host pages whose packets Submit copies into a channel's
// ring.
func (m Model) direct() bool { return m == ModelGaudi3 }

// copyPacketSize is the bytes one copy packet takes in a CB: LIN_DMA on
// Gaudi1/2, LIN_PDMA with its completion write on Gaudi3.
func (m Model) copyPacketSize() int {
	if m.direct() {
		return gaudi3.LinPDMAWrCompSize
	}
	return LinDMASize
}

// parsesCB reports whether the driver parses the model's user packets
// (gaudi_cs_parser on Gaudi1's external queues, which refuses some with
// EPERM). Gaudi2's parser only checks the queue and the CB address.
func (m Model) parsesCB() bool { return m == ModelGaudi1 }

// ModelFromDeviceID maps the PCI device id that HW_IP_INFO reports to a
// Model: 0x1000 and 0x1010 (Gaudi, Gaudi secured) -> ModelGaudi1, 0x1020 ->
// ModelGaudi2, 0x1060 -> ModelGaudi3. The out-of-tree board variants
// HL2000M (0x1001, 0x1011), Gaudi2 HL-288 (0x1021) and Gaudi3 single die
// (0x1062) and HL-338 (0x1063) map to their ASIC (pci_ids.h of Intel's
// driver). Gaudi3's die-1 function (0x1061) is not taken: nothing in the
// sources shows it as a compute node of its own. Anything else (e.g. Goya,
// 0x0001) returns an error wrapping ErrUnsupportedDevice.
func ModelFromDeviceID(id uint32) (Model, error) {
	switch id {
	case hlsys.DeviceIDGaudi, hlsys.DeviceIDGaudiSec, 0x1001, 0x1011:
		return ModelGaudi1, nil
	case hlsys.DeviceIDGaudi2, 0x1021:
		return ModelGaudi2, nil
	case hlsys.DeviceIDGaudi3, hlsys.DeviceIDGaudi3SingleDie, hlsys.DeviceIDGaudi3HL338:
		return ModelGaudi3, nil
	}
	detail := fmt.Sprintf("PCI device id %#06x", id)
	if id == hlsys.DeviceIDGoya {
		detail += " (Goya)"
	}
	return 0, newErr("identify device", ErrUnsupportedDevice, detail, nil)
}

// queueTable is the one place that knows which DMA queues this package
// submits to, per model and direction. Device.H2DQueues, D2HQueues and
// D2DQueues (and through them the engine) read it; nothing else holds a
// queue id.
//
// Gaudi1 (drivers/accel/habanalabs/gaudi/gaudi.c): gaudi_queue_type marks
// DMA_0_0..DMA_0_3 (ids 0-3) and DMA_1_0..DMA_1_3 (ids 4-7) QUEUE_TYPE_EXT,
// and gaudi_set_fixed_properties gives every external queue driver_only = 0
// and cb_alloc_flags = CB_ALLOC_KERNEL: all eight streams take a kernel CB
// handle, whose packets gaudi_cs_parser checks. The split (DMA_0 down, DMA_1
// up) is hl-thunk's convention (gaudi_get_dma_down_qid/up_qid) and keeps the
// two directions on two engines.
//
// Gaudi2 (drivers/accel/habanalabs/gaudi2/gaudi2.c): every queue is
// QUEUE_TYPE_HW with CB_ALLOC_USER, but gaudi2_cs_parser, for a user CB,
// calls gaudi2_validate_cb_address, which fails with EINVAL ("h/w queue %d
// is disabled") unless gaudi2_is_queue_enabled accepts the id, and of the
// PDMA ids that function accepts only GAUDI2_QUEUE_ID_PDMA_0_0,
// GAUDI2_QUEUE_ID_PDMA_0_1 and GAUDI2_QUEUE_ID_PDMA_1_0 (0, 1, 4). The other
// PDMA streams are reserved for the ARC firmware (gaudi2_init_qman_common
// enables only some CPs of each PDMA QMAN). The ids are streams (QMAN PQs):
// 0 and 1 are two streams of engine PDMA_0, 4 the only user stream of
// engine PDMA_1. A PDMA engine moves data in any direction (the LIN_DMA's
// addresses decide), so the split is ours: host-to-device and
// device-to-device on PDMA_0 (two streams, so two CSs can be queued on it),
// device-to-host alone on PDMA_1, so that the two PCIe directions run on
// two engines at the same time and a large upload never queues in front of
// a download.
//
// Gaudi3: Intel's out-of-tree driver has no user queue (its only queue is
// the driver's CPU queue); the queue sets are PDMA channels picked per
// device from hw_ip_info's pdma_user_owned_ch_mask (newG3 in gaudi3.go).
type queueTable struct {
	h2d, d2h, d2d []uint32
}

var modelQueues = map[Model]queueTable{
	ModelGaudi1: {
		h2d: []uint32{0, 1, 2, 3}, // GAUDI_QUEUE_ID_DMA_0_0..3
		d2h: []uint32{4, 5, 6, 7}, // GAUDI_QUEUE_ID_DMA_1_0..3
		d2d: []uint32{0, 1, 2, 3}, // shares DMA_0 with host-to-device
	},
	ModelGaudi2: {
		h2d: []uint32{0, 1}, // GAUDI2_QUEUE_ID_PDMA_0_0, PDMA_0_1
		d2h: []uint32{4},    // GAUDI2_QUEUE_ID_PDMA_1_0
		d2d: []uint32{0, 1}, // PDMA_0 (EDMA would need engine setup this package does not do)
	},
}

// queues returns the model's queue table (zero for Gaudi3).
func (m Model) queues() queueTable { return modelQueues[m] }

// queues returns the device's queue sets: the model's table, or on Gaudi3
// the PDMA channels direct mode uses.
func (d *Device) queues() queueTable {
	if d.g3 != nil {
		return queueTable{h2d: d.g3.h2d, d2h: d.g3.d2h, d2d: d.g3.d2d}
	}
	return d.model.queues()
}

// DMAPath says how the Device moves data: "command submission" (LIN_DMA
// command buffers on the driver's PCI DMA queues, Gaudi1/2) or "direct
// PDMA mode" (LIN_PDMA packets in the submission rings of user-owned PDMA
// channels mapped with MAP_BLOCK, Gaudi3).
func (d *Device) DMAPath() string {
	if d.model.direct() {
		return "direct PDMA mode: LIN_PDMA rings on user-owned PDMA channels (MAP_BLOCK), completion counters and user interrupts"
	}
	if d.model.userCB() {
		return "command submission: LIN_DMA user CBs on the PDMA queues"
	}
	return "command submission: LIN_DMA kernel CBs on the external DMA queues"
}
