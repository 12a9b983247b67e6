package hlsys

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// TestPacketValues pins the packet values of packets.go to the driver's
// own headers, which linux-libc-dev does not ship (so uapicheck cannot
// compile them): torvalds/linux drivers/accel/habanalabs/include/
// gaudi/gaudi_packets.h (G1, blob 91908587) and gaudi2/gaudi2_packets.h
// (G2, blob 7d352a81). Each row cites the header line it copies.
func TestPacketValues(t *testing.T) {
	// The LIN_DMA and NOP packets as the headers lay them out.
	type packetLinDMA struct { // G1/G2: struct packet_lin_dma
		tsize, ctl       uint32
		srcAddr, dstAddr uint64
	}
	type packetNOP struct{ reserved, ctl uint32 } // G1/G2: struct packet_nop

	tests := []struct {
		name      string
		got, want uint64
		cite      string
	}{
		{"PacketWReg32", PacketWReg32, 0x1, "G1/G2 enum packet_id: PACKET_WREG_32 = 0x1,"},
		{"PacketMsgLong", PacketMsgLong, 0x3, "PACKET_MSG_LONG = 0x3,"},
		{"PacketMsgShort", PacketMsgShort, 0x4, "PACKET_MSG_SHORT = 0x4,"},
		{"PacketFence", PacketFence, 0x8, "PACKET_FENCE = 0x8,"},
		{"PacketLinDMA", PacketLinDMA, 0x9, "PACKET_LIN_DMA = 0x9,"},
		{"PacketNOP", PacketNOP, 0xA, "PACKET_NOP = 0xA,"},
		{"PacketStop", PacketStop, 0xB, "PACKET_STOP = 0xB,"},
		{"CtlOpcodeShift", CtlOpcodeShift, 24, "#define GAUDI_PKT_CTL_OPCODE_SHIFT 24 (GAUDI2_PKT_CTL_OPCODE_SHIFT 24)"},
		{"CtlOpcodeMask", CtlOpcodeMask, 0x1F000000, "#define GAUDI_PKT_CTL_OPCODE_MASK 0x1F000000"},
		{"CtlEB", CtlEB, 0x20000000, "#define GAUDI_PKT_CTL_EB_MASK 0x20000000"},
		{"CtlRB", CtlRB, 0x40000000, "#define GAUDI_PKT_CTL_RB_MASK 0x40000000"},
		{"CtlMB", CtlMB, 0x80000000, "#define GAUDI_PKT_CTL_MB_MASK 0x80000000"},
		{"LinDMAWrCompEn", LinDMAWrCompEn, 0x1, "#define GAUDI_PKT_LIN_DMA_CTL_WRCOMP_EN_MASK 0x00000001 (GAUDI2_PKT_LIN_DMA_CTL_WRCOMP_MASK)"},
		{"LinDMALin", LinDMALin, 0x8, "#define GAUDI_PKT_LIN_DMA_CTL_LIN_MASK 0x00000008"},
		{"LinDMAMemSet", LinDMAMemSet, 0x10, "#define GAUDI_PKT_LIN_DMA_CTL_MEMSET_MASK 0x00000010 (GAUDI2_PKT_LIN_DMA_CTL_MEMSET_MASK)"},
		{"Gaudi1DstAddrMask", Gaudi1DstAddrMask, 0x00FFFFFFFFFFFFFF, "#define GAUDI_PKT_LIN_DMA_DST_ADDR_MASK 0x00FFFFFFFFFFFFFFull"},
		{"LinDMAPacketSize", LinDMAPacketSize, uint64(unsafe.Sizeof(packetLinDMA{})), "struct packet_lin_dma { __le32 tsize; __le32 ctl; __le64 src_addr; __le64 dst_addr; }"},
		{"NOPPacketSize", NOPPacketSize, uint64(unsafe.Sizeof(packetNOP{})), "struct packet_nop { __le32 reserved; __le32 ctl; }"},
	}
	for _, tt := range tests {
		assert.Equalf(t, tt.want, tt.got, "%s (header: %s)", tt.name, tt.cite)
	}
}
