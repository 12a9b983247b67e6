package dma

import (
	"fmt"

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
	// VA) and takes user command buffers on every queue.
	ModelGaudi2
	// ModelGaudi3 is driven like Gaudi2 for memory. It needs Intel's
	// out-of-tree driver; its queue ids are not known to this package, so
	// the DMA helpers (queues, CopySync) report ErrNotSupported.
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
func (m Model) userCB() bool { return m != ModelGaudi1 }

// ModelFromDeviceID maps the PCI device id that HW_IP_INFO reports to a
// Model: 0x1000 and 0x1010 (Gaudi, Gaudi secured) -> ModelGaudi1, 0x1020 ->
// ModelGaudi2, 0x1060 -> ModelGaudi3. The out-of-tree board variants
// HL2000M (0x1001, 0x1011), Gaudi2 HL-288 (0x1021) and Gaudi3 HL-338
// (0x1063) map to their ASIC. Anything else (e.g. Goya, 0x0001) returns an
// error wrapping ErrUnsupportedDevice.
func ModelFromDeviceID(id uint32) (Model, error) {
	switch id {
	case hlsys.DeviceIDGaudi, hlsys.DeviceIDGaudiSec, 0x1001, 0x1011:
		return ModelGaudi1, nil
	case hlsys.DeviceIDGaudi2, 0x1021:
		return ModelGaudi2, nil
	case hlsys.DeviceIDGaudi3, 0x1063:
		return ModelGaudi3, nil
	}
	detail := fmt.Sprintf("PCI device id %#06x", id)
	if id == hlsys.DeviceIDGoya {
		detail += " (Goya)"
	}
	return 0, newErr("identify device", ErrUnsupportedDevice, detail, nil)
}
