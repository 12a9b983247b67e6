package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Frame layout constants.
const (
	// Magic opens every frame: "gxfw" in little-endian byte order.
	Magic uint32 = 'g' | 'x'<<8 | 'f'<<16 | 'w'<<24
	// HeaderSize is the size of the fixed frame header.
	HeaderSize = 24
	// MaxFrame is the default limit on a whole frame (header and payload)
	// that a decoder accepts. Control frames are far smaller; data frames
	// of the TCP path may use a larger limit (see ConnConfig.MaxFrame).
	MaxFrame = 1 << 20
	// MaxFrameLimit is the longest frame the header can describe (its
	// Length is 32 bits): ConnConfig.MaxFrame is clamped to it.
	MaxFrameLimit uint64 = HeaderSize + math.MaxUint32
	// MaxFDs is the largest fd count a header may announce (the kernel's
	// SCM_MAX_FD).
	MaxFDs = 253
)

// Protocol versions this package speaks. A frame whose header carries a
// version outside [MinVersion, MaxVersion] is refused with a
// [*VersionError]; [Negotiate] picks the highest version two peers share.
const (
	MinVersion uint16 = 1
	MaxVersion uint16 = 1
	// Version is the version this package encodes frames with.
	Version = MaxVersion
)

// Type is a message type.
type Type uint8

// Message types.
const (
	TypeHello         Type = 1  // [Hello]
	TypeHelloAck      Type = 2  // [HelloAck]
	TypeError         Type = 3  // [Error]
	TypeRemoteKey     Type = 4  // [RemoteKey]
	TypePut           Type = 5  // [Put]
	TypeGet           Type = 6  // [Get]
	TypeCompletion    Type = 7  // [Completion]
	TypeInvalidate    Type = 8  // [Invalidate]
	TypeImportRequest Type = 9  // [ImportRequest]
	TypeImportReply   Type = 10 // [ImportReply]
	TypeBye           Type = 11 // [Bye]
	TypeData          Type = 12 // [Data]
	TypeHeartbeat     Type = 13 // [Heartbeat]
	TypeRDMAConnect   Type = 14 // [RDMAConnect]
	TypeAuth          Type = 15 // [Auth]
	TypeCancel        Type = 16 // [Cancel]
	TypeAppMsg        Type = 17 // [AppMsg]
	TypeMsgCredit     Type = 18 // [MsgCredit]
	TypePutList       Type = 19 // [PutList]
	TypeGetList       Type = 20 // [GetList]
	TypeListReply     Type = 21 // [ListReply]
	TypeMsgRing       Type = 22 // [MsgRing]
	TypeMsgBell       Type = 23 // [MsgBell]

	typeMax = TypeMsgBell
)

var typeNames = [...]string{
	TypeHello: "Hello", TypeHelloAck: "HelloAck", TypeError: "Error", TypeRemoteKey: "RemoteKey",
	TypePut: "Put", TypeGet: "Get", TypeCompletion: "Completion", TypeInvalidate: "Invalidate",
	TypeImportRequest: "ImportRequest", TypeImportReply: "ImportReply", TypeBye: "Bye", TypeData: "Data",
	TypeHeartbeat: "Heartbeat", TypeRDMAConnect: "RDMAConnect", TypeAuth: "Auth",
	TypeCancel: "Cancel", TypeAppMsg: "AppMsg", TypeMsgCredit: "MsgCredit",
	TypePutList: "PutList", TypeGetList: "GetList", TypeListReply: "ListReply",
	TypeMsgRing: "MsgRing", TypeMsgBell: "MsgBell",
}

func (t Type) String() string {
	if t.Valid() {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Valid reports whether t is a known message type.
func (t Type) Valid() bool { return t >= TypeHello && t <= typeMax }

// hasRequestID reports whether frames of type t carry a request id; the
// header's RequestID must be 0 for the others.
func (t Type) hasRequestID() bool {
	switch t {
	case TypeError, TypePut, TypeGet, TypeCompletion, TypeImportRequest, TypeImportReply, TypeData, TypeCancel,
		TypePutList, TypeGetList, TypeListReply:
		return true
	}
	return false
}

// FDs returns the number of file descriptors a frame of type t carries
// (ImportReply: 2, the allocation and its validity flag; MsgRing: 1, the
// ring's memfd; every other type: 0).
func (t Type) FDs() int {
	switch t {
	case TypeImportReply:
		return 2
	case TypeMsgRing:
		return 1
	}
	return 0
}

// Header is the fixed 24-byte frame header. All integers are
// little-endian:
//
//	off size field
//	  0    4 Magic
//	  4    2 Version    protocol version of this frame
//	  6    1 Type       message type
//	  7    1 Flags      none defined in version 1: must be 0
//	  8    4 Length     payload length (the frame is HeaderSize+Length bytes)
//	 12    2 NumFDs     file descriptors attached by the transport
//	 14    2 reserved   must be 0
//	 16    8 RequestID  correlates requests and replies (0 for unsolicited types)
type Header struct {
	Version   uint16
	Type      Type
	Flags     uint8
	Length    uint32
	NumFDs    uint16
	RequestID uint64
}

// Append appends the encoded header to b.
func (h Header) Append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, Magic)
	b = binary.LittleEndian.AppendUint16(b, h.Version)
	b = append(b, byte(h.Type), h.Flags)
	b = binary.LittleEndian.AppendUint32(b, h.Length)
	b = binary.LittleEndian.AppendUint16(b, h.NumFDs)
	b = binary.LittleEndian.AppendUint16(b, 0)
	return binary.LittleEndian.AppendUint64(b, h.RequestID)
}

// ParseHeader decodes and validates the header at the start of b (b may be
// longer, or hold only the header). maxFrame bounds the whole frame
// (<= 0 means MaxFrame). It checks the magic, the version, the type,
// reserved fields and flags, the fd count, and that the announced frame
// fits in maxFrame; it does not check that b holds the payload.
func ParseHeader(b []byte, maxFrame int) (Header, error) {
	if maxFrame <= 0 {
		maxFrame = MaxFrame
	}
	if len(b) < HeaderSize {
		return Header{}, malformed("truncated header: %d of %d bytes", len(b), HeaderSize)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != Magic {
		return Header{}, malformed("bad magic %#08x", m)
	}
	h := Header{
		Version:   binary.LittleEndian.Uint16(b[4:]),
		Type:      Type(b[6]),
		Flags:     b[7],
		Length:    binary.LittleEndian.Uint32(b[8:]),
		NumFDs:    binary.LittleEndian.Uint16(b[12:]),
		RequestID: binary.LittleEndian.Uint64(b[16:]),
	}
	if h.Version < MinVersion || h.Version > MaxVersion {
		return Header{}, &VersionError{Got: h.Version, Min: MinVersion, Max: MaxVersion}
	}
	if !h.Type.Valid() {
		return Header{}, malformed("unknown message type %d", b[6])
	}
	if h.Flags != 0 {
		return Header{}, malformed("%v: unknown flags %#02x", h.Type, h.Flags)
	}
	if r := binary.LittleEndian.Uint16(b[14:]); r != 0 {
		return Header{}, malformed("%v: reserved header field %#04x", h.Type, r)
	}
	if h.NumFDs > MaxFDs {
		return Header{}, malformed("%v: %d fds announced (max %d)", h.Type, h.NumFDs, MaxFDs)
	}
	if uint64(HeaderSize)+uint64(h.Length) > uint64(maxFrame) {
		return Header{}, &detailError{kind: ErrTooLarge,
			msg: fmt.Sprintf("%v: %d-byte payload exceeds the %d-byte frame limit", h.Type, h.Length, maxFrame)}
	}
	return h, nil
}

// DecodeFrame validates a whole frame and returns its header and payload
// (a subslice of frame). maxFrame is as for [ParseHeader].
func DecodeFrame(frame []byte, maxFrame int) (Header, []byte, error) {
	h, err := ParseHeader(frame, maxFrame)
	if err != nil {
		return Header{}, nil, err
	}
	if want := uint64(HeaderSize) + uint64(h.Length); uint64(len(frame)) != want {
		return Header{}, nil, malformed("%v: frame is %d bytes, header announces %d", h.Type, len(frame), want)
	}
	return h, frame[HeaderSize:], nil
}

// Message is one of the protocol's messages: [*Hello], [*HelloAck],
// [*Error], [*RemoteKey], [*Put], [*Get], [*Completion], [*Invalidate],
// [*ImportRequest], [*ImportReply], [*Bye], [*Data], [*Heartbeat],
// [*RDMAConnect], [*Auth], [*Cancel], [*AppMsg], [*MsgCredit]. The set
// is closed.
type Message interface {
	// Type is the message type.
	Type() Type
	// AppendPayload appends the payload encoding to b. It fails with
	// ErrInvalid if the message cannot be encoded.
	AppendPayload(b []byte) ([]byte, error)
	// DecodePayload decodes and validates payload, the body of a frame
	// whose header is h. It checks the header against the type (type, fd
	// count, request id, length) and refuses any non-canonical encoding
	// with ErrMalformed, so a successful decode re-encodes to the same
	// bytes. On error the message is left unchanged.
	DecodePayload(h Header, payload []byte) error

	// requestID is the request id the header carries (0 for types without).
	requestID() uint64
}

// AppendFrame appends a whole frame (header and payload) carrying m to b.
// The header's fd count is m.Type().FDs(); the transport must attach that
// many descriptors.
func AppendFrame(b []byte, m Message) ([]byte, error) {
	start := len(b)
	t := m.Type()
	b = Header{}.Append(b)
	b, err := m.AppendPayload(b)
	if err != nil {
		return b[:start], err
	}
	n := len(b) - start - HeaderSize
	if uint64(n) > math.MaxUint32 {
		return b[:start], invalid("%v: %d-byte payload", t, n)
	}
	h := Header{Version: Version, Type: t, Length: uint32(n), NumFDs: uint16(t.FDs()), RequestID: m.requestID()}
	h.Append(b[start:start])
	return b, nil
}

// NewMessage returns a new zero message of type t, or nil for an unknown
// type.
func NewMessage(t Type) Message {
	switch t {
	case TypeHello:
		return new(Hello)
	case TypeHelloAck:
		return new(HelloAck)
	case TypeError:
		return new(Error)
	case TypeRemoteKey:
		return new(RemoteKey)
	case TypePut:
		return new(Put)
	case TypeGet:
		return new(Get)
	case TypeCompletion:
		return new(Completion)
	case TypeInvalidate:
		return new(Invalidate)
	case TypeImportRequest:
		return new(ImportRequest)
	case TypeImportReply:
		return new(ImportReply)
	case TypeBye:
		return new(Bye)
	case TypeData:
		return new(Data)
	case TypeHeartbeat:
		return new(Heartbeat)
	case TypeRDMAConnect:
		return new(RDMAConnect)
	case TypeAuth:
		return new(Auth)
	case TypeCancel:
		return new(Cancel)
	case TypeAppMsg:
		return new(AppMsg)
	case TypeMsgCredit:
		return new(MsgCredit)
	case TypePutList:
		return new(PutList)
	case TypeGetList:
		return new(GetList)
	case TypeListReply:
		return new(ListReply)
	case TypeMsgRing:
		return new(MsgRing)
	case TypeMsgBell:
		return new(MsgBell)
	}
	return nil
}

// Decode validates a whole frame and decodes its message. maxFrame is as
// for [ParseHeader]. It allocates the message; hot paths can switch on
// the header type and call DecodePayload on a message of their own.
func Decode(frame []byte, maxFrame int) (Header, Message, error) {
	h, p, err := DecodeFrame(frame, maxFrame)
	if err != nil {
		return Header{}, nil, err
	}
	m := NewMessage(h.Type)
	if err := m.DecodePayload(h, p); err != nil {
		return Header{}, nil, err
	}
	return h, m, nil
}

// checkHeader validates the parts of h a message decoder depends on.
func checkHeader(h Header, t Type, payload []byte) error {
	if h.Type != t {
		return malformed("%v decoder given a %v frame", t, h.Type)
	}
	if h.Version < MinVersion || h.Version > MaxVersion {
		return &VersionError{Got: h.Version, Min: MinVersion, Max: MaxVersion}
	}
	if int(h.NumFDs) != t.FDs() {
		return malformed("%v: %d fds attached, want %d", t, h.NumFDs, t.FDs())
	}
	if !t.hasRequestID() && h.RequestID != 0 {
		return malformed("%v: request id %d on an unsolicited message", t, h.RequestID)
	}
	if uint64(h.Length) != uint64(len(payload)) {
		return malformed("%v: payload is %d bytes, header announces %d", t, len(payload), h.Length)
	}
	return nil
}

// dec reads little-endian fields from an untrusted payload. A short read
// sets short and returns zeros; callers check done() at the end.
type dec struct {
	b     []byte
	short bool
}

func (d *dec) take(n int) []byte {
	if d.short || n < 0 || n > len(d.b) {
		d.short = true
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) u8() uint8 {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *dec) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (d *dec) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// zeros reads n reserved bytes and reports whether they are all zero.
func (d *dec) zeros(n int) bool {
	for _, c := range d.take(n) {
		if c != 0 {
			return false
		}
	}
	return true
}

// done reports an error if the payload was short or has trailing bytes.
func (d *dec) done(t Type) error {
	if d.short {
		return malformed("%v: truncated payload", t)
	}
	if len(d.b) != 0 {
		return malformed("%v: %d trailing bytes", t, len(d.b))
	}
	return nil
}

var zero8 [8]byte

func appendU16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func appendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }
