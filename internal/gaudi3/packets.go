package gaudi3

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// PQM packets: what a PDMA channel's queue manager reads from the
// submission ring (specs_h9/gaudi3/gaudi3_pqm_packets.h). All are
// little-endian dwords; the second dword of every packet is its control
// word, with the opcode in bits 28..24 and the engine barrier in bit 29.
// Packet lengths are multiples of 8 bytes.

// Opcodes (enum pqm_packet_id).
const (
	OpWReg32   = 0x1
	OpMsgLong  = 0x3
	OpMsgShort = 0x4
	OpFence    = 0x8
	OpLinPDMA  = 0x9
	OpNOP      = 0xA
	OpStop     = 0xB
)

// Control-word fields.
const (
	CtlPred       Field = 0<<8 | 5 // MSG_LONG, FENCE (predicate; gxfer writes 0)
	CtlOpcode     Field = 24<<8 | 5
	CtlEngBarrier Field = 29<<8 | 1
)

// LIN_PDMA (struct pqm_packet_lin_pdma, then the trailing dwords of
// synapse's direct_mode_packets/pqm_packets.cpp struct
// lin_pdma_single_wr_comp_t). Byte offsets:
const (
	LinTSizeOff      = 0  // transfer size in bytes
	LinCtlOff        = 4  // control word
	LinSrcLoOff      = 8  // source (or memset value) bits 31..0
	LinDstLoOff      = 12 // destination bits 31..0
	LinSrcHiOff      = 16 // source bits 63..32
	LinDstHiOff      = 20 // destination bits 63..32
	LinWrCompLoOff   = 24 // completion write address bits 31..0 (wrcomp=1)
	LinWrCompDataOff = 28 // completion write data (wrcomp=1)
	LinWrCompHiOff   = 32 // completion write address bits 63..32 (wrcomp=1)
	LinFenceOff      = 36 // fence data (wrcomp=1 and fence_en=1)

	LinPDMASize       = 24 // without a completion write
	LinPDMAWrCompSize = 40 // with one completion write
)

// LIN_PDMA control-word fields.
const (
	LinWrComp            Field = 0<<8 | 2 // number of completion writes (gxfer: 0 or 1)
	LinEndianSwap        Field = 2<<8 | 2
	LinMemset            Field = 4<<8 | 1
	LinFenceEn           Field = 5<<8 | 1
	LinWrCompHiFromReg   Field = 6<<8 | 1
	LinConsecutiveComp12 Field = 7<<8 | 1
	LinIncContextID      Field = 8<<8 | 1
	LinAddOffset0        Field = 9<<8 | 1
	LinSrcDstMSBFromReg  Field = 10<<8 | 1
	LinEnDescCommit      Field = 11<<8 | 1
	LinAdvanceCQ         Field = 12<<8 | 1 // advcnt_hbw_complq
	LinDirection         Field = 13<<8 | 1
)

// Fence data (the LIN_PDMA fence dword, synapse pqm_packets.cpp union
// FenceData; the same bits as FENCE's cfg word without ch_id).
const (
	FenceDec    Field = 0<<8 | 4
	FenceChID   Field = 4<<8 | 5 // FENCE packet only
	FenceTarget Field = 16<<8 | 14
	FenceID     Field = 30<<8 | 2
)

// MSG_LONG (struct pqm_packet_msg_long): value, control, 64-bit address.
const (
	MsgLongValueOff = 0
	MsgLongCtlOff   = 4
	MsgLongAddrOff  = 8
	MsgLongSize     = 16

	MsgLongOp Field = 20<<8 | 2 // 0: write the value, 1: write a timestamp
)

// FENCE (struct pqm_packet_fence) and NOP (struct pqm_packet_nop).
const (
	FenceCfgOff = 0
	FenceCtlOff = 4
	FenceSize   = 8

	NOPSize = 8

	NOPMsgBarrier Field = 0<<8 | 1
)

// Bits no field names: the decoder rejects packets that set them. The
// predicate field is included: gxfer never predicates a packet.
const (
	linUnknownCtl     = 0xC0FFC000
	msgLongUnknownCtl = 0xC0CFFFE0 | 0x1F
	fenceUnknownCtl   = 0xC0FFFFE0 | 0x1F
	nopUnknownCtl     = 0xC0FFFFFF
	fenceUnknownCfg   = 0x0000FE00
	linFenceUnknown   = 0x0000FFF0
	nopUnknownDword0  = 0xFFFFFFFE

	msgLongOpTimestamp = 1
)

// Errors of Append and Decode.
var (
	// ErrShort: fewer bytes than the packet needs.
	ErrShort = errors.New("gaudi3: packet truncated")
	// ErrMalformed: an unknown opcode, a reserved bit set, or a value
	// out of its field.
	ErrMalformed = errors.New("gaudi3: malformed packet")
	// ErrUnsupported: a packet form whose layout the sources leave open
	// (fence without a completion write, more than one completion write,
	// the register-sourced address modes).
	ErrUnsupported = errors.New("gaudi3: unsupported packet form")
)

// Packet is one PQM packet.
type Packet interface {
	// Len is the packet's length in bytes.
	Len() int
	// Append encodes the packet after b.
	Append(b []byte) ([]byte, error)
}

// Dir is LIN_PDMA's direction bit. Synapse sets DeviceToHost only for
// device-to-host copies and HostToDevice for everything else, device to
// device included.
type Dir uint8

const (
	DirDeviceToHost Dir = 0
	DirHostToDevice Dir = 1
)

// FenceData is a fence wait: before the packet runs, the channel waits
// for fence counter ID to reach Target and then subtracts Dec.
type FenceData struct {
	ID     uint8  // 0..3
	Target uint16 // 14 bits
	Dec    uint8  // 4 bits
}

func (f FenceData) encode() (uint32, error) {
	if !FenceID.Fits(uint64(f.ID)) || !FenceTarget.Fits(uint64(f.Target)) || !FenceDec.Fits(uint64(f.Dec)) {
		return 0, fmt.Errorf("%w: fence %+v out of range", ErrMalformed, f)
	}
	w := FenceID.Put(0, uint32(f.ID))
	w = FenceTarget.Put(w, uint32(f.Target))
	return FenceDec.Put(w, uint32(f.Dec)), nil
}

func decodeFence(w uint32) FenceData {
	return FenceData{ID: uint8(FenceID.Get(w)), Target: uint16(FenceTarget.Get(w)), Dec: uint8(FenceDec.Get(w))}
}

// LinPDMA copies Size bytes from Src to Dst (device VAs: host memory
// mapped through the PMMU or HBM), or with Memset fills Dst with the
// 64-bit value in Src.
type LinPDMA struct {
	Src, Dst     uint64
	Size         uint32
	Dir          Dir
	Memset       bool
	EngBarrier   bool
	IncContextID bool // synapse sets it on every LIN_PDMA
	DescCommit   bool // en_desc_commit; synapse sets it on every LIN_PDMA
	AdvanceCQ    bool // advance the channel's completion-queue counter

	// WrComp adds one completion write: WrCompData to WrCompAddr after the
	// transfer (the 40-byte form).
	WrComp     bool
	WrCompAddr uint64
	WrCompData uint32

	// Fence, only with WrComp, makes the packet wait on a fence counter.
	Fence   bool
	FenceAt FenceData
}

// Len implements Packet.
func (p LinPDMA) Len() int {
	if p.WrComp {
		return LinPDMAWrCompSize
	}
	return LinPDMASize
}

func flag(f Field, w uint32, on bool) uint32 {
	if on {
		return f.Put(w, 1)
	}
	return w
}

// Append implements Packet.
func (p LinPDMA) Append(b []byte) ([]byte, error) {
	if p.Dir > DirHostToDevice {
		return b, fmt.Errorf("%w: LIN_PDMA direction %d", ErrMalformed, p.Dir)
	}
	if p.Fence && !p.WrComp {
		return b, fmt.Errorf("%w: LIN_PDMA fence without a completion write", ErrUnsupported)
	}
	ctl := CtlOpcode.Put(0, OpLinPDMA)
	ctl = LinDirection.Put(ctl, uint32(p.Dir))
	ctl = flag(LinMemset, ctl, p.Memset)
	ctl = flag(CtlEngBarrier, ctl, p.EngBarrier)
	ctl = flag(LinIncContextID, ctl, p.IncContextID)
	ctl = flag(LinEnDescCommit, ctl, p.DescCommit)
	ctl = flag(LinAdvanceCQ, ctl, p.AdvanceCQ)
	ctl = flag(LinWrComp, ctl, p.WrComp)
	ctl = flag(LinFenceEn, ctl, p.Fence)
	var fence uint32
	if p.Fence {
		var err error
		if fence, err = p.FenceAt.encode(); err != nil {
			return b, err
		}
	}
	o := len(b)
	b = append(b, make([]byte, p.Len())...)
	le := binary.LittleEndian
	le.PutUint32(b[o+LinTSizeOff:], p.Size)
	le.PutUint32(b[o+LinCtlOff:], ctl)
	le.PutUint32(b[o+LinSrcLoOff:], uint32(p.Src))
	le.PutUint32(b[o+LinDstLoOff:], uint32(p.Dst))
	le.PutUint32(b[o+LinSrcHiOff:], uint32(p.Src>>32))
	le.PutUint32(b[o+LinDstHiOff:], uint32(p.Dst>>32))
	if p.WrComp {
		le.PutUint32(b[o+LinWrCompLoOff:], uint32(p.WrCompAddr))
		le.PutUint32(b[o+LinWrCompDataOff:], p.WrCompData)
		le.PutUint32(b[o+LinWrCompHiOff:], uint32(p.WrCompAddr>>32))
		le.PutUint32(b[o+LinFenceOff:], fence)
	}
	return b, nil
}

// MsgLong writes a 32-bit value (or, with Timestamp, a timestamp) to a
// 64-bit address: a register (a fence counter, a sync object) or memory.
type MsgLong struct {
	Addr       uint64
	Value      uint32
	Timestamp  bool
	EngBarrier bool
}

// Len implements Packet.
func (MsgLong) Len() int { return MsgLongSize }

// Append implements Packet.
func (p MsgLong) Append(b []byte) ([]byte, error) {
	ctl := CtlOpcode.Put(0, OpMsgLong)
	ctl = flag(CtlEngBarrier, ctl, p.EngBarrier)
	if p.Timestamp {
		ctl = MsgLongOp.Put(ctl, msgLongOpTimestamp)
	}
	o := len(b)
	b = append(b, make([]byte, MsgLongSize)...)
	binary.LittleEndian.PutUint32(b[o+MsgLongValueOff:], p.Value)
	binary.LittleEndian.PutUint32(b[o+MsgLongCtlOff:], ctl)
	binary.LittleEndian.PutUint64(b[o+MsgLongAddrOff:], p.Addr)
	return b, nil
}

// Fence makes the channel wait until fence counter Wait.ID of channel
// ChID reaches Wait.Target, then subtract Wait.Dec.
type Fence struct {
	Wait       FenceData
	ChID       uint8 // 5 bits
	EngBarrier bool
}

// Len implements Packet.
func (Fence) Len() int { return FenceSize }

// Append implements Packet.
func (p Fence) Append(b []byte) ([]byte, error) {
	cfg, err := p.Wait.encode()
	if err != nil {
		return b, err
	}
	if !FenceChID.Fits(uint64(p.ChID)) {
		return b, fmt.Errorf("%w: FENCE ch_id %d", ErrMalformed, p.ChID)
	}
	cfg = FenceChID.Put(cfg, uint32(p.ChID))
	ctl := flag(CtlEngBarrier, CtlOpcode.Put(0, OpFence), p.EngBarrier)
	b = binary.LittleEndian.AppendUint32(b, cfg)
	return binary.LittleEndian.AppendUint32(b, ctl), nil
}

// NOP does nothing; gxfer pads the ring with NOPs so that no packet
// crosses the ring's end.
type NOP struct {
	MsgBarrier bool
	EngBarrier bool
}

// Len implements Packet.
func (NOP) Len() int { return NOPSize }

// Append implements Packet.
func (p NOP) Append(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint32(b, flag(NOPMsgBarrier, 0, p.MsgBarrier))
	return binary.LittleEndian.AppendUint32(b, flag(CtlEngBarrier, CtlOpcode.Put(0, OpNOP), p.EngBarrier)), nil
}

// Decode reads the packet at the start of b and returns it with its
// length. It accepts exactly what the encoders produce: any reserved bit
// set, an unknown opcode or an unsupported form is an error, so that
// Append(Decode(b)) gives back the same bytes.
func Decode(b []byte) (Packet, int, error) {
	if len(b) < 8 {
		return nil, 0, ErrShort
	}
	le := binary.LittleEndian
	ctl := le.Uint32(b[4:])
	eb := CtlEngBarrier.Get(ctl) == 1
	switch CtlOpcode.Get(ctl) {
	case OpLinPDMA:
		p, n, err := decodeLin(b, ctl, eb)
		if err != nil {
			return nil, 0, err
		}
		return p, n, nil
	case OpMsgLong:
		if len(b) < MsgLongSize {
			return nil, 0, ErrShort
		}
		if ctl&msgLongUnknownCtl != 0 || MsgLongOp.Get(ctl) > msgLongOpTimestamp {
			return nil, 0, fmt.Errorf("%w: MSG_LONG control %#x", ErrMalformed, ctl)
		}
		return MsgLong{Addr: le.Uint64(b[MsgLongAddrOff:]), Value: le.Uint32(b[MsgLongValueOff:]),
			Timestamp: MsgLongOp.Get(ctl) == msgLongOpTimestamp, EngBarrier: eb}, MsgLongSize, nil
	case OpFence:
		cfg := le.Uint32(b[FenceCfgOff:])
		if ctl&fenceUnknownCtl != 0 || cfg&fenceUnknownCfg != 0 {
			return nil, 0, fmt.Errorf("%w: FENCE %#x %#x", ErrMalformed, cfg, ctl)
		}
		return Fence{Wait: decodeFence(cfg), ChID: uint8(FenceChID.Get(cfg)), EngBarrier: eb}, FenceSize, nil
	case OpNOP:
		w0 := le.Uint32(b)
		if ctl&nopUnknownCtl != 0 || w0&nopUnknownDword0 != 0 {
			return nil, 0, fmt.Errorf("%w: NOP %#x %#x", ErrMalformed, w0, ctl)
		}
		return NOP{MsgBarrier: NOPMsgBarrier.Get(w0) == 1, EngBarrier: eb}, NOPSize, nil
	}
	return nil, 0, fmt.Errorf("%w: opcode %#x", ErrMalformed, CtlOpcode.Get(ctl))
}

// DecodeLinPDMA is Decode for a packet that may be a LIN_PDMA, without
// boxing it in a Packet (an executor's per-packet allocation): lin
// reports whether b holds a LIN_PDMA's opcode (false: use Decode); then
// p, n and err are what Decode returns for it.
func DecodeLinPDMA(b []byte) (p LinPDMA, n int, lin bool, err error) {
	if len(b) < 8 {
		return LinPDMA{}, 0, false, nil
	}
	ctl := binary.LittleEndian.Uint32(b[4:])
	if CtlOpcode.Get(ctl) != OpLinPDMA {
		return LinPDMA{}, 0, false, nil
	}
	p, n, err = decodeLin(b, ctl, CtlEngBarrier.Get(ctl) == 1)
	return p, n, true, err
}

func decodeLin(b []byte, ctl uint32, eb bool) (LinPDMA, int, error) {
	if ctl&linUnknownCtl != 0 {
		return LinPDMA{}, 0, fmt.Errorf("%w: LIN_PDMA control %#x", ErrMalformed, ctl)
	}
	unsupported := LinEndianSwap.Mask() | LinWrCompHiFromReg.Mask() | LinConsecutiveComp12.Mask() |
		LinAddOffset0.Mask() | LinSrcDstMSBFromReg.Mask()
	if ctl&unsupported != 0 || LinWrComp.Get(ctl) > 1 || (LinFenceEn.Get(ctl) == 1 && LinWrComp.Get(ctl) == 0) {
		return LinPDMA{}, 0, fmt.Errorf("%w: LIN_PDMA control %#x", ErrUnsupported, ctl)
	}
	p := LinPDMA{
		Dir: Dir(LinDirection.Get(ctl)), Memset: LinMemset.Get(ctl) == 1, EngBarrier: eb,
		IncContextID: LinIncContextID.Get(ctl) == 1, DescCommit: LinEnDescCommit.Get(ctl) == 1,
		AdvanceCQ: LinAdvanceCQ.Get(ctl) == 1, WrComp: LinWrComp.Get(ctl) == 1, Fence: LinFenceEn.Get(ctl) == 1,
	}
	if len(b) < p.Len() {
		return LinPDMA{}, 0, ErrShort
	}
	le := binary.LittleEndian
	p.Size = le.Uint32(b[LinTSizeOff:])
	p.Src = uint64(le.Uint32(b[LinSrcHiOff:]))<<32 | uint64(le.Uint32(b[LinSrcLoOff:]))
	p.Dst = uint64(le.Uint32(b[LinDstHiOff:]))<<32 | uint64(le.Uint32(b[LinDstLoOff:]))
	if p.WrComp {
		p.WrCompAddr = uint64(le.Uint32(b[LinWrCompHiOff:]))<<32 | uint64(le.Uint32(b[LinWrCompLoOff:]))
		p.WrCompData = le.Uint32(b[LinWrCompDataOff:])
		fence := le.Uint32(b[LinFenceOff:])
		if !p.Fence && fence != 0 || fence&linFenceUnknown != 0 {
			return LinPDMA{}, 0, fmt.Errorf("%w: LIN_PDMA fence dword %#x", ErrMalformed, fence)
		}
		p.FenceAt = decodeFence(fence)
	}
	return p, p.Len(), nil
}
