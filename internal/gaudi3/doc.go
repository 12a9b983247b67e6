// Package gaudi3 holds the Gaudi3 hardware layouts gxfer's direct PDMA mode
// programs from user space: the addresses of the user PDMA channels'
// CH_A register blocks (the blocks HL_MEM_OP_MAP_BLOCK maps), the offsets
// and bit fields of the registers in such a block (submission ring, fence
// counters, completion queue and its interrupt message), and the PQM
// packets written into the ring (LIN_PDMA, MSG_LONG, FENCE, NOP) with an
// encoder and a strict decoder.
//
// The numbers are transcribed from Intel's sources; the tests compare
// every offset, bit position and width with a table in which each number
// sits next to its source (file, struct, field), and show that altering
// any transcribed number fails them. docs/gaudi3.md describes the
// programming model, what was checked and what the sources leave open.
//
// The package has no state and makes no system call: it is shared by the
// device path (dma) and its emulator (dma/hlsim).
package gaudi3
