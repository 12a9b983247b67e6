package hlsim

import "github.com/gxfer/gxfer/internal/hlsys"

// The queue ids of both ASICs, from the uAPI header's enum gaudi_queue_id
// and enum gaudi2_queue_id, and what the driver lets a user CS do on each
// (see RULES.md for the functions each rule mirrors).
const (
	g1QueueCPUPQ = hlsys.Gaudi1QueueCPUPQ // 8: driver only
	g1QueueSize  = 113                    // GAUDI_QUEUE_ID_SIZE (max_queues)

	g2QueuePDMA00 = 0
	g2QueuePDMA01 = 1
	g2QueuePDMA10 = 4
	g2QueueCPUPQ  = hlsys.Gaudi2QueueCPUPQ // 260: driver only
	g2QueueSize   = g2QueueCPUPQ + 1       // GAUDI2_QUEUE_ID_SIZE (max_queues)
)

// g2EDMAQueueBases are the first queue ids of the eight Gaudi2 EDMA QMANs
// (DCORE0..3 EDMA_0 and EDMA_1, four streams each).
var g2EDMAQueueBases = [...]uint32{8, 12, 48, 52, 84, 88, 120, 124}

// queueKind is what a CS chunk on a queue gets from the driver.
type queueKind uint8

const (
	// qInvalid: queue_index >= max_queues (validate_queue_index, EINVAL).
	qInvalid queueKind = iota
	// qDriverOnly: the CPU queue (validate_queue_index, EINVAL).
	qDriverOnly
	// qDisabled: Gaudi2 queue gaudi2_is_queue_enabled refuses
	// (gaudi2_validate_cb_address, EINVAL "h/w queue %d is disabled").
	qDisabled
	// qExternal: Gaudi1 DMA_0_x/DMA_1_x, QUEUE_TYPE_EXT with
	// CB_ALLOC_KERNEL: a kernel CB handle, parsed and patched. Executed.
	qExternal
	// qDMA: Gaudi2 PDMA_0_0, PDMA_0_1, PDMA_1_0 and the EDMA queues,
	// QUEUE_TYPE_HW with CB_ALLOC_USER: a user CB device address. Executed.
	qDMA
	// qOther: a queue the driver takes (Gaudi1 internal queues, Gaudi2
	// MME/TPC/ROT/NIC queues) whose engine the emulator does not model;
	// after the driver's checks pass, the CS fails with EOPNOTSUPP.
	qOther
)

// queueKindOf classifies queue q of the model.
func (a *addrMap) queueKindOf(q uint32) queueKind {
	if !a.gaudi2 {
		switch {
		case q >= g1QueueSize:
			return qInvalid
		case q == g1QueueCPUPQ:
			return qDriverOnly
		case q < g1QueueCPUPQ:
			return qExternal
		}
		return qOther
	}
	if a.gaudi3 {
		// GAUDI3_QUEUE_ID_SIZE is 1: queue 0 is the driver's CPU queue.
		if q == 0 {
			return qDriverOnly
		}
		return qInvalid
	}
	switch {
	case q >= g2QueueSize:
		return qInvalid
	case q == g2QueueCPUPQ:
		return qDriverOnly
	case q == g2QueuePDMA00 || q == g2QueuePDMA01 || q == g2QueuePDMA10:
		return qDMA
	case q < 8:
		return qDisabled // PDMA_0_2, PDMA_0_3, PDMA_1_1..3: reserved for the ARC firmware
	}
	for _, b := range g2EDMAQueueBases {
		if q >= b && q < b+4 {
			return qDMA
		}
	}
	return qOther
}

// EmulatedQueues returns the queue ids on which the emulator executes
// LIN_DMA and NOP: Gaudi1 0-7 (the external PCI DMA queues), Gaudi2 0, 1,
// 4 (the PDMA streams the driver enables for users) and the 32 EDMA
// queues.
func (d *Device) EmulatedQueues() []uint32 {
	var qs []uint32
	limit := uint32(g1QueueSize)
	if d.amap.gaudi3 {
		return nil // copies go through the PDMA channels (gaudi3.go)
	}
	if d.amap.gaudi2 {
		limit = g2QueueSize
	}
	for q := uint32(0); q < limit; q++ {
		if k := d.amap.queueKindOf(q); k == qExternal || k == qDMA {
			qs = append(qs, q)
		}
	}
	return qs
}
