package hlsys

// Packet opcodes, placed in ctl bits 24-28 (the second dword of a packet).
const (
	PacketWReg32   = 0x1
	PacketMsgLong  = 0x3
	PacketMsgShort = 0x4
	PacketFence    = 0x8
	PacketLinDMA   = 0x9
	PacketNOP      = 0xA
	PacketStop     = 0xB
)

// Packet sizes in bytes.
const (
	LinDMAPacketSize = 24
	NOPPacketSize    = 8
)

// Control-word bits common to all packets.
const (
	CtlOpcodeShift = 24
	CtlOpcodeMask  = 0x1F << CtlOpcodeShift
	CtlEB          = 1 << 29 // engine barrier
	CtlRB          = 1 << 30 // register barrier (Gaudi1; must be 1 on LIN_DMA)
	CtlMB          = 1 << 31 // message barrier
)

// LIN_DMA control bits.
const (
	LinDMAWrCompEn = 1 << 0 // Gaudi1 wr_comp_en / Gaudi2 wrcomp
	LinDMALin      = 1 << 3 // Gaudi1 only: must be 1
	LinDMAMemSet   = 1 << 4 // src_addr holds the 64-bit fill value

	// Gaudi1DstAddrMask: the kernel keeps 56 bits of a Gaudi1 dst_addr; the
	// top byte holds context_id_high.
	Gaudi1DstAddrMask = (uint64(1) << 56) - 1
)

// LinDMA max transfer size: tsize is a 32-bit byte count. Implementations
// split larger copies; keeping chunks below 2 GiB leaves the top bit clear.
const LinDMAMaxTSize = 1 << 31

// Queue ids used for host<->device DMA.
const (
	// Gaudi1 external PCI DMA queues: DMA_0_x host->device, DMA_1_x
	// device->host; both take kernel CB handles.
	Gaudi1QueueDMA0_0 = 0
	Gaudi1QueueDMA1_0 = 4
	Gaudi1QueueCPUPQ  = 8
	// Gaudi2 PDMA queues: PDMA_0_x host->device, PDMA_1_x device->host; all
	// Gaudi2 queues take user CBs (device VA + CSChunkFlagsUserAllocCB).
	Gaudi2QueuePDMA0_0 = 0
	Gaudi2QueuePDMA1_0 = 4
	Gaudi2QueueCPUPQ   = 260

	StreamsPerDMAEngine = 4
)
