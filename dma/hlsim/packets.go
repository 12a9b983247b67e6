package hlsim

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// Packet opcodes (ctl bits 24-28) of both ASICs.
const (
	opWReg32          = 0x1
	opWRegBulk        = 0x2
	opMsgLong         = 0x3
	opMsgShort        = 0x4
	opCPDMA           = 0x5
	opRepeat          = 0x6
	opMsgProt         = 0x7
	opFence           = 0x8
	opLinDMA          = 0x9
	opNOP             = 0xA
	opStop            = 0xB
	opArbPoint        = 0xC
	opWait            = 0xD
	opCBList          = 0xE // Gaudi2
	opLoadAndExe      = 0xF
	opWriteArcStream  = 0x10 // Gaudi2
	opLastReadFromArc = 0x11 // Gaudi2
	opWReg64Short     = 0x12 // Gaudi2
	opWReg64Long      = 0x13 // Gaudi2
)

// LIN_DMA ctl bits the emulator does not model.
const (
	g1LinDMAUnmodeled = 1<<1 | 1<<2 | 1<<5 | 1<<6 // transpose, dtype, compress, decompress
	g2LinDMAEndian    = 3 << 1                    // endian swap mode
)

// gaudi1PacketSizes are the fixed packet sizes of the Gaudi1 parser
// (0: not a Gaudi1 packet). WREG_BULK is variable but always rejected.
var gaudi1PacketSizes = [32]int{
	opWReg32: 8, opWRegBulk: 8, opMsgLong: 16, opMsgShort: 8, opCPDMA: 16, opRepeat: 8,
	opMsgProt: 16, opFence: 8, opLinDMA: 24, opNOP: 8, opStop: 8, opArbPoint: 8, opWait: 8,
	opLoadAndExe: 16,
}

// gaudi2Known marks the opcodes Gaudi2 defines.
var gaudi2Known = [32]bool{
	opWReg32: true, opWRegBulk: true, opMsgLong: true, opMsgShort: true, opCPDMA: true,
	opRepeat: true, opMsgProt: true, opFence: true, opLinDMA: true, opNOP: true, opStop: true,
	opArbPoint: true, opWait: true, opCBList: true, opLoadAndExe: true, opWriteArcStream: true,
	opLastReadFromArc: true, opWReg64Short: true, opWReg64Long: true,
}

func packetOpcode(ctl uint32) uint32 { return ctl & hlsys.CtlOpcodeMask >> hlsys.CtlOpcodeShift }

// parseError is a CB the Gaudi1 parser rejects at submission.
type parseError struct {
	errno unix.Errno
	off   int
	msg   string
}

func (e *parseError) Error() string { return fmt.Sprintf("CB offset %d: %s", e.off, e.msg) }

func parseErrno(err error) error {
	if pe, ok := err.(*parseError); ok {
		return pe.errno
	}
	return unix.EINVAL
}

// gaudi1Parse validates a CB of a Gaudi1 external queue the way the
// driver's parser does (gaudi_validate_cb): packets must be known and lie
// inside the CB (EINVAL); MSG_PROT, CP_DMA, STOP, WREG_BULK and
// LOAD_AND_EXE with dst=1 are refused (EPERM). In MMU mode the parser
// does not look inside a LIN_DMA: its lin and RB bits are not checked
// (the engine refuses lin=0 at execution, see engine.linDMA).
func gaudi1Parse(cb []byte) error {
	for off := 0; off < len(cb); {
		if len(cb)-off < 8 {
			return &parseError{unix.EINVAL, off, "truncated packet header"}
		}
		ctl := binary.LittleEndian.Uint32(cb[off+4:])
		op := packetOpcode(ctl)
		size := gaudi1PacketSizes[op]
		if size == 0 {
			return &parseError{unix.EINVAL, off, fmt.Sprintf("invalid packet id %#x", op)}
		}
		if off+size > len(cb) {
			return &parseError{unix.EINVAL, off, fmt.Sprintf("packet %#x is out of CB boundary", op)}
		}
		switch op {
		case opMsgProt, opCPDMA, opStop, opWRegBulk:
			return &parseError{unix.EPERM, off, fmt.Sprintf("user not allowed to use packet %#x", op)}
		case opLoadAndExe:
			if binary.LittleEndian.Uint32(cb[off:])&1 != 0 {
				return &parseError{unix.EPERM, off, "LOAD_AND_EXE with dst=1"}
			}
		case opLinDMA, opWReg32, opMsgLong, opMsgShort, opRepeat, opFence, opNOP, opArbPoint:
		default:
			return &parseError{unix.EINVAL, off, fmt.Sprintf("invalid packet header %#x", op)}
		}
		off += size
	}
	return nil
}

// packetError is a packet an engine cannot execute: the job faults.
type packetError struct {
	off         int
	op          uint32
	msg         string
	notEmulated bool
}

func (e *packetError) Error() string {
	if e.notEmulated {
		return fmt.Sprintf("CB offset %d: packet %#x: %s (not emulated)", e.off, e.op, e.msg)
	}
	return fmt.Sprintf("CB offset %d: packet %#x: %s", e.off, e.op, e.msg)
}

// hostFault is a failed access to host memory behind a valid mapping
// (the pages went away under a pinned mapping).
type hostFault struct{ addr uint64 }

func (e *hostFault) Error() string {
	return fmt.Sprintf("host memory at %#x is not accessible", e.addr)
}
