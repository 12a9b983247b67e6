package dma

import (
	"encoding/binary"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// PacketFlags are the barrier bits of a packet's control word.
type PacketFlags uint8

const (
	// EB is the engine barrier (ctl bit 29): the packet waits until the
	// engine's previous work has finished.
	EB PacketFlags = 1 << iota
	// MB is the message barrier (ctl bit 31): the packet waits until the
	// previous messages and writes have completed.
	MB
)

func (f PacketFlags) ctl() uint32 {
	var c uint32
	if f&EB != 0 {
		c |= hlsys.CtlEB
	}
	if f&MB != 0 {
		c |= hlsys.CtlMB
	}
	return c
}

// Packet sizes.
const (
	LinDMASize = hlsys.LinDMAPacketSize // 24 bytes
	NOPSize    = hlsys.NOPPacketSize    // 8 bytes
)

// linDMACtl builds the LIN_DMA control word (gaudi-uapi §7.1, §7.2).
// Gaudi1 needs lin=1 and RB=1; Gaudi2 (and Gaudi3) set neither, and leave
// the context-id / hl-thunk "bf16/fp16" bits 6-23 zero.
func linDMACtl(m Model, flags PacketFlags, memset bool) uint32 {
	c := uint32(hlsys.PacketLinDMA)<<hlsys.CtlOpcodeShift | flags.ctl()
	if m == ModelGaudi1 {
		c |= hlsys.CtlRB | hlsys.LinDMALin
	}
	if memset {
		c |= hlsys.LinDMAMemSet
	}
	return c
}

func putLinDMA(dst []byte, m Model, dstAddr, src uint64, size uint32, ctl uint32) int {
	_ = dst[LinDMASize-1]
	if m == ModelGaudi1 {
		dstAddr &= hlsys.Gaudi1DstAddrMask // the top byte is context_id_high
	}
	binary.LittleEndian.PutUint32(dst[0:], size)
	binary.LittleEndian.PutUint32(dst[4:], ctl)
	binary.LittleEndian.PutUint64(dst[8:], src)
	binary.LittleEndian.PutUint64(dst[16:], dstAddr)
	return LinDMASize
}

// EncodeLinDMA writes a 24-byte LIN_DMA packet copying size bytes from
// srcAddr to dstAddr into dst and returns 24. dst must hold 24 bytes.
//
// Layout (little endian): tsize u32 @0, ctl u32 @4, src_addr u64 @8,
// dst_addr u64 @16. ctl has opcode 9 in bits 24-28 plus EB (29) / MB (31)
// from flags; Gaudi1 also sets lin (bit 3) and RB (bit 30) and keeps only
// the low 56 bits of dstAddr.
func EncodeLinDMA(dst []byte, m Model, dstAddr, srcAddr uint64, size uint32, flags PacketFlags) int {
	return putLinDMA(dst, m, dstAddr, srcAddr, size, linDMACtl(m, flags, false))
}

// EncodeMemset writes a 24-byte LIN_DMA packet with the mem_set bit (ctl
// bit 4): the engine fills size bytes at dstAddr with the 64-bit pattern
// value, which travels in the src_addr field. Use a byte-replicated value
// (e.g. 0xABABABABABABABAB) for a byte fill.
func EncodeMemset(dst []byte, m Model, dstAddr, value uint64, size uint32, flags PacketFlags) int {
	return putLinDMA(dst, m, dstAddr, value, size, linDMACtl(m, flags, true))
}

// EncodeNOP writes an 8-byte NOP packet (opcode 0xA, only EB/MB set) and
// returns 8. A NOP with EB|MB after the last LIN_DMA makes the CB's
// completion wait for the DMA engine (gaudi-uapi §7.3).
func EncodeNOP(dst []byte, flags PacketFlags) int {
	_ = dst[NOPSize-1]
	binary.LittleEndian.PutUint32(dst[0:], 0)
	binary.LittleEndian.PutUint32(dst[4:], uint32(hlsys.PacketNOP)<<hlsys.CtlOpcodeShift|flags.ctl())
	return NOPSize
}
