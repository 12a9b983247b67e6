package engine

import (
	"time"

	"github.com/gxfer/gxfer/internal/datapath/rdmapath"
)

// The RDMA transport lives in internal/datapath/rdmapath; the engine
// keeps its public configuration and description.

// RDMASliceMin is the size from which a transfer between host memory is
// split over every NIC the endpoint has (RDMAInfo.NICs), and from which
// the host chunks of a staged transfer of Gaudi memory take turns on them.
const RDMASliceMin = rdmapath.SliceMin

// RDMAConfig configures the RDMA context New opens.
type RDMAConfig struct {
	// Disabled opens no RDMA device: Dial("tcp") then always uses TCP.
	Disabled bool
	// Device forces this RDMA device (e.g. "mlx5_0", "rxe0"). Default: the
	// NICs closest to gaudi0 on the PCI tree (rdma.ClosestNICs: the
	// closest and those tied with it, up to wire.MaxNICs) when the Gaudi
	// has a PCI address, else the first device by name with an active
	// port.
	Device string
	// Devices forces these devices, in this order (at most wire.MaxNICs;
	// exclusive with Device): transfers are sliced over them. A peer's
	// NIC i is reached through this side's NIC i, so both sides should
	// list NICs on the same networks in the same order; past a device
	// that does not open, the rest are not used (the first one that
	// opens is, alone, if the first does not).
	Devices []string
	// Port forces this port (default: the device's first active port).
	// Verbs numbers ports in a uint8: New refuses one outside [0, 255]
	// with ErrInvalid.
	Port int
	// GIDIndex is the source GID index of the queue pairs (default 0; on
	// RoCE v2 over an IPv4 address it may need to be another entry).
	// Verbs carries it in a uint8 (sgid_index): New refuses one outside
	// [0, 255] with ErrInvalid.
	GIDIndex int
	// CQSpin keeps the completion queue's goroutine polling this long
	// after the last completion before it sleeps in the netpoller (lower
	// latency for back-to-back operations, a core busy meanwhile).
	// Default 0: sleep at once.
	CQSpin time.Duration
	// CQBusyPoll never lets the completion queue's goroutine sleep: the
	// lowest latency, and one core kept busy while the engine is open.
	CQBusyPoll bool
}

// RDMAInfo describes the engine's RDMA context (for `gxfer info`).
type RDMAInfo struct {
	Available bool   // an RDMA device is open and usable
	Reason    string // why RDMA is unavailable ("" when Available)
	Device    string // name of the first (closest) NIC in use, e.g. "mlx5_0"
	Port      int    // its port number
	GIDIndex  int    // the GID table index in use
	GID       string // that GID, as text
	LinkLayer string // "InfiniBand", "Ethernet (RoCE)" or "unspecified"
	MTU       int    // active MTU in bytes
	// DMABuf is "supported" when Gaudi memory is registered with
	// ibv_reg_dmabuf_mr (zero copy from device memory), else why not
	// (e.g. EOPNOTSUPP on Soft-RoCE): such memory is staged through
	// pinned host buffers by the Gaudi DMA engine.
	DMABuf         string
	DMABufAttempts uint64 // ibv_reg_dmabuf_mr calls on Gaudi buffers
	DMABufMRs      uint64 // of which succeeded
	CachedMRs      int    // host memory regions in the registration cache
	// NICs are every device the engine uses, Device first: endpoints have
	// a queue pair on each NIC both sides have, and large host-memory
	// transfers are sliced over them.
	NICs []string
}

// RDMA describes the engine's RDMA context, or why there is none.
func (e *Engine) RDMA() RDMAInfo {
	if e.invalid() {
		return RDMAInfo{Reason: "engine not made by New"}
	}
	if e.rdma == nil {
		return RDMAInfo{Reason: e.rdmaWhy}
	}
	return RDMAInfo(e.rdma.Info())
}

// openRDMA opens the RDMA transport and registers it, or records why
// there is none. RDMA is optional: a failure here never fails New.
func (e *Engine) openRDMA() {
	cfg := rdmapath.Config{DeviceConfig: rdmapath.DeviceConfig(e.cfg.RDMA), Logger: e.log, SysRoot: e.cfg.SysRoot}
	if devs := e.cp.DevList(); len(devs) > 0 {
		cfg.GaudiPCI = devs[0].Node.PCIAddr
	}
	t, err := rdmapath.Open(e.env(), cfg)
	if err != nil {
		e.rdmaWhy = err.Error()
		return
	}
	e.rdma = t
	e.transports.Register(t)
}
