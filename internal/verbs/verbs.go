// Package verbs is gxfer's only cgo package: a thin binding to libibverbs.
//
// libibverbs is not linked: a small C shim dlopen()s "libibverbs.so.1" at
// run time (Load), so gxfer builds with only Go and gcc and runs where
// rdma-core is absent; every entry point then returns an error wrapping
// ErrUnavailable with the dlopen reason. The few ABI structs the shim uses
// are declared in abi.h from the documented layout, and a test built against
// the real <infiniband/verbs.h> (package abicheck, build tag verbsabi) checks
// every size, offset and constant relied on.
//
// Crossings are batched: QP.PostSend and QP.PostRecv write a whole chain of
// work requests and their scatter/gather entries into C memory owned by the
// QP and post it with one cgo call; CQ.Poll polls up to len(out)
// completions into a C array owned by the CQ with one call and converts
// them. Work requests, SGEs and completions never live in the Go heap.
//
// Objects are not safe for a Close that races with their other methods;
// package rdma provides that ordering. Post and Poll are safe for concurrent
// use.
package verbs

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
)

var (
	// ErrUnavailable is wrapped by every error caused by libibverbs being
	// absent or unusable; the wrapping error carries the reason.
	ErrUnavailable = errors.New("RDMA unavailable")
	// ErrNoDevice wraps ErrUnavailable: libibverbs loaded but reports no
	// device.
	ErrNoDevice = fmt.Errorf("%w: no RDMA device", ErrUnavailable)
	// ErrNotSupported is wrapped when the device or kernel lacks a feature
	// (e.g. DMA-BUF memory regions: EOPNOTSUPP).
	ErrNotSupported = errors.New("not supported")
	// ErrClosed is returned by methods of a closed object.
	ErrClosed = errors.New("verbs: closed")
)

// Error is a failed verb: its name and errno. It unwraps to the errno and,
// for EOPNOTSUPP, to ErrNotSupported too.
type Error struct {
	Op    string
	Errno syscall.Errno
}

func (e *Error) Error() string { return "verbs: " + e.Op + ": " + e.Errno.Error() }

// Unwrap returns the errno (and ErrNotSupported for EOPNOTSUPP).
func (e *Error) Unwrap() []error {
	if e.Errno == syscall.EOPNOTSUPP {
		return []error{e.Errno, ErrNotSupported}
	}
	return []error{e.Errno}
}

func errnoErr(op string, e syscall.Errno) error {
	if e == 0 {
		e = syscall.EIO
	}
	return &Error{Op: op, Errno: e}
}

// LibraryEnv names the environment variable that overrides the library
// Load opens (default "libibverbs.so.1").
const LibraryEnv = "GXFER_LIBIBVERBS"

// DefaultLibrary is the soname Load opens.
const DefaultLibrary = "libibverbs.so.1"

// GID is a port's 128-bit global identifier (RoCE: an IPv6 address).
type GID [16]byte

// IsZero reports whether g is all zeroes (an unset table entry).
func (g GID) IsZero() bool { return g == GID{} }

// String formats g as verbs tools do: eight groups of four hex digits.
func (g GID) String() string {
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
		g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15])
}

// Access is enum ibv_access_flags.
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	AccessRelaxedOrder Access = 1 << 20 // IBV_ACCESS_RELAXED_ORDERING (optional: masked if unsupported)
)

// MTU is enum ibv_mtu.
type MTU uint32

// MTU values.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes (0 if invalid).
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

func (m MTU) String() string {
	if b := m.Bytes(); b > 0 {
		return fmt.Sprint(b)
	}
	return fmt.Sprintf("MTU(%d)", uint32(m))
}

// PortState is enum ibv_port_state.
type PortState uint32

// Port states.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

func (s PortState) String() string {
	switch s {
	case PortNop:
		return "NOP"
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	case PortActiveDefer:
		return "ACTIVE_DEFER"
	}
	return fmt.Sprintf("PortState(%d)", uint32(s))
}

// LinkLayer is IBV_LINK_LAYER_*.
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand, LinkLayerUnspecified:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return fmt.Sprintf("LinkLayer(%d)", uint8(l))
}

// QPType is enum ibv_qp_type.
type QPType uint32

// QPTypeRC is a reliable-connected queue pair (the only type gxfer uses).
const (
	QPTypeRC QPType = 2
	QPTypeUC QPType = 3
	QPTypeUD QPType = 4
)

// QPState is enum ibv_qp_state.
type QPState uint32

// QP states.
const (
	QPSReset   QPState = 0
	QPSInit    QPState = 1
	QPSRTR     QPState = 2
	QPSRTS     QPState = 3
	QPSSQD     QPState = 4
	QPSSQE     QPState = 5
	QPSErr     QPState = 6
	QPSUnknown QPState = 7
)

func (s QPState) String() string {
	switch s {
	case QPSReset:
		return "RESET"
	case QPSInit:
		return "INIT"
	case QPSRTR:
		return "RTR"
	case QPSRTS:
		return "RTS"
	case QPSSQD:
		return "SQD"
	case QPSSQE:
		return "SQE"
	case QPSErr:
		return "ERR"
	}
	return fmt.Sprintf("QPState(%d)", uint32(s))
}

// QPAttrMask is enum ibv_qp_attr_mask.
type QPAttrMask uint32

// QP attribute mask bits.
const (
	QPAttrState           QPAttrMask = 1 << 0
	QPAttrCurState        QPAttrMask = 1 << 1
	QPAttrAccessFlags     QPAttrMask = 1 << 3
	QPAttrPKeyIndex       QPAttrMask = 1 << 4
	QPAttrPort            QPAttrMask = 1 << 5
	QPAttrQKey            QPAttrMask = 1 << 6
	QPAttrAV              QPAttrMask = 1 << 7
	QPAttrPathMTU         QPAttrMask = 1 << 8
	QPAttrTimeout         QPAttrMask = 1 << 9
	QPAttrRetryCnt        QPAttrMask = 1 << 10
	QPAttrRNRRetry        QPAttrMask = 1 << 11
	QPAttrRQPSN           QPAttrMask = 1 << 12
	QPAttrMaxQPRDAtomic   QPAttrMask = 1 << 13
	QPAttrMinRNRTimer     QPAttrMask = 1 << 15
	QPAttrSQPSN           QPAttrMask = 1 << 16
	QPAttrMaxDestRDAtomic QPAttrMask = 1 << 17
	QPAttrCap             QPAttrMask = 1 << 19
	QPAttrDestQPN         QPAttrMask = 1 << 20
)

// WROpcode is enum ibv_wr_opcode.
type WROpcode uint32

// Work request opcodes.
const (
	WRRDMAWrite        WROpcode = 0
	WRRDMAWriteWithImm WROpcode = 1
	WRSend             WROpcode = 2
	WRSendWithImm      WROpcode = 3
	WRRDMARead         WROpcode = 4
)

// SendFlags is enum ibv_send_flags.
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// WCOpcode is enum ibv_wc_opcode. Only valid in successful completions.
type WCOpcode uint32

// Completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 1 << 7
	WCRecvRDMAWithImm WCOpcode = WCRecv + 1
)

// WCFlags is enum ibv_wc_flags.
type WCFlags uint32

// Completion flags.
const (
	WCWithGRH WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
)

// WCStatus is enum ibv_wc_status.
type WCStatus uint32

// Completion statuses.
const (
	WCSuccess          WCStatus = 0
	WCLocLenErr        WCStatus = 1
	WCLocQPOpErr       WCStatus = 2
	WCLocEECOpErr      WCStatus = 3
	WCLocProtErr       WCStatus = 4
	WCWRFlushErr       WCStatus = 5
	WCMWBindErr        WCStatus = 6
	WCBadRespErr       WCStatus = 7
	WCLocAccessErr     WCStatus = 8
	WCRemInvReqErr     WCStatus = 9
	WCRemAccessErr     WCStatus = 10
	WCRemOpErr         WCStatus = 11
	WCRetryExcErr      WCStatus = 12
	WCRNRRetryExcErr   WCStatus = 13
	WCLocRDDViolErr    WCStatus = 14
	WCRemInvRDReqErr   WCStatus = 15
	WCRemAbortErr      WCStatus = 16
	WCInvEECNErr       WCStatus = 17
	WCInvEECStateErr   WCStatus = 18
	WCFatalErr         WCStatus = 19
	WCRespTimeoutErr   WCStatus = 20
	WCGeneralErr       WCStatus = 21
	WCTMErr            WCStatus = 22
	WCTMRndvIncomplete WCStatus = 23
)

var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
	"TM error", "TM software rendezvous",
}

// String is ibv_wc_status_str's text.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("unknown status %d", uint32(s))
}

// DeviceAttr is the part of struct ibv_device_attr gxfer reports.
type DeviceAttr struct {
	FWVer           string
	NodeGUID        uint64 // as the bytes read big-endian
	SysImageGUID    uint64
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         int
	DeviceCapFlags  uint32
	MaxSGE          int
	MaxSGERd        int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	MaxSRQ          int
	AtomicCap       uint32
	MaxPKeys        uint16
	PhysPortCnt     uint8
}

// PortAttr is the part of struct ibv_port_attr gxfer reports.
type PortAttr struct {
	State        PortState
	MaxMTU       MTU
	ActiveMTU    MTU
	GIDTableLen  int
	PortCapFlags uint32
	MaxMsgSize   uint32
	PKeyTableLen uint16
	LID          uint16
	SMLID        uint16
	LMC          uint8
	ActiveWidth  uint8
	ActiveSpeed  uint8
	PhysState    uint8
	LinkLayer    LinkLayer
}

// QPCap is struct ibv_qp_cap.
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// QPInitAttr describes a queue pair to create.
type QPInitAttr struct {
	SendCQ *CQ
	RecvCQ *CQ
	Cap    QPCap
	Type   QPType
	SigAll bool // every send WR completes signaled
}

// AHAttr is struct ibv_ah_attr (with its global route).
type AHAttr struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	DLID         uint16
	SL           uint8
	SrcPathBits  uint8
	StaticRate   uint8
	IsGlobal     bool
	PortNum      uint8
}

// QPAttr is struct ibv_qp_attr (the fields gxfer uses).
type QPAttr struct {
	State           QPState
	CurState        QPState
	PathMTU         MTU
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPN         uint32
	AccessFlags     Access
	Cap             QPCap
	AH              AHAttr
	PKeyIndex       uint16
	MaxRDAtomic     uint8
	MaxDestRDAtomic uint8
	MinRNRTimer     uint8
	PortNum         uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
}

// SGE is struct ibv_sge: one registered local range.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is one send-queue work request. SGE is copied at post time.
type SendWR struct {
	ID         uint64
	Opcode     WROpcode
	Flags      SendFlags
	SGE        []SGE
	Imm        uint32 // host byte order; sent in network order (WithImm opcodes)
	RemoteAddr uint64 // RDMA write/read
	RKey       uint32
}

// RecvWR is one receive-queue work request.
type RecvWR struct {
	ID  uint64
	SGE []SGE
}

// WC is one work completion (struct ibv_wc). For a failed completion only
// ID, Status, VendorErr and QPNum are valid.
type WC struct {
	ID        uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	Imm       uint32 // host byte order, valid with WCWithImm
	QPNum     uint32
	SrcQP     uint32
	Flags     WCFlags
}

// Counts are the objects created through this package and not yet
// destroyed, process-wide. Tests use them to prove Close releases everything.
type Counts struct {
	Contexts, PDs, MRs, Channels, CQs, QPs int64
	PreparedSends                          int64
}

var live struct {
	contexts, pds, mrs, channels, cqs, qps atomic.Int64
	preparedSends                          atomic.Int64
}

// Live returns the live object counts.
func Live() Counts {
	return Counts{
		Contexts: live.contexts.Load(), PDs: live.pds.Load(), MRs: live.mrs.Load(),
		Channels: live.channels.Load(), CQs: live.cqs.Load(), QPs: live.qps.Load(),
		PreparedSends: live.preparedSends.Load(),
	}
}
