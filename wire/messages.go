package wire

import (
	"fmt"
	"math"
)

// Bounds on variable-length fields.
const (
	MaxNameLen    = 255  // Hello.Name
	MaxErrorLen   = 1024 // Error.Message
	maxDataLength = math.MaxUint32 - 8
)

// Caps is a capability bitmask exchanged in Hello. Unknown bits are
// carried and ignored, so newer peers can announce more.
type Caps uint64

// Capabilities.
const (
	CapFDPassing  Caps = 1 << 0 // the transport carries fds (unix socket)
	CapSharedHost Caps = 1 << 1 // host memory can be shared as memfds (ImportRequest)
	CapDMABuf     Caps = 1 << 2 // Gaudi memory can be exported as DMA-BUF fds
	CapRDMA       Caps = 1 << 3 // RDMA keys (RemoteKey.RKey) are usable
	CapInlineData Caps = 1 << 4 // Put/Get data may travel in Data frames (TCP path)
	CapHeartbeat  Caps = 1 << 5 // the sender sends Heartbeats when idle and expects them
	CapLane       Caps = 1 << 6 // (in a dialer's Hello) an extra connection of an endpoint, for large transfers
)

// Status is the result code of a request, carried by Completion and Error.
// Unknown codes from newer peers are kept as they are.
type Status uint32

// Status codes.
const (
	StatusOK           Status = 0
	StatusMalformed    Status = 1  // the request could not be decoded
	StatusVersion      Status = 2  // no common protocol version
	StatusRefused      Status = 3  // the peer is not allowed (credentials, policy)
	StatusBadKey       Status = 4  // the key's MAC does not verify, or it names another engine
	StatusOutOfRange   Status = 5  // the request lies outside the key's range
	StatusStale        Status = 6  // the allocation was freed or its generation changed
	StatusAccess       Status = 7  // the key does not grant the access (read/write)
	StatusNotSupported Status = 8  // the operation or memory type is not supported here
	StatusNoResources  Status = 9  // out of memory, fds, queue space
	StatusCanceled     Status = 10 // the request was canceled
	StatusShutdown     Status = 11 // the peer is closing
	StatusInternal     Status = 12 // the peer failed
)

var statusNames = [...]string{
	StatusOK: "ok", StatusMalformed: "malformed", StatusVersion: "unsupported version",
	StatusRefused: "refused", StatusBadKey: "bad key", StatusOutOfRange: "out of range",
	StatusStale: "stale", StatusAccess: "access denied", StatusNotSupported: "not supported",
	StatusNoResources: "no resources", StatusCanceled: "canceled", StatusShutdown: "shutting down",
	StatusInternal: "internal error",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status %d", uint32(s))
}

// ---------------------------------------------------------------- Hello

// Hello opens a connection: each side states who it is and what it can do.
// The dialer sends Hello, the listener answers HelloAck (or Error). Hello
// and HelloAck are always encoded in the version-1 frame format so that
// peers of any version can negotiate.
//
// PID and UID are claims: on a unix socket the receiver compares them with
// the kernel's SO_PEERCRED and refuses a mismatch.
type Hello struct {
	MinVersion   uint16 // lowest protocol version the sender speaks (>= 1)
	MaxVersion   uint16 // highest (>= MinVersion)
	Caps         Caps
	PID          uint32
	PIDNamespace uint64 // inode of the sender's /proc/self/ns/pid
	UID          uint32
	EngineID     EngineID
	Name         string // free-form, at most MaxNameLen bytes
}

const helloFixed = 2 + 2 + 4 + 8 + 8 + 4 + 4 + 16 + 2

// Type returns TypeHello.
func (m *Hello) Type() Type        { return TypeHello }
func (m *Hello) requestID() uint64 { return 0 }

func (m *Hello) check() error {
	if m.MinVersion == 0 || m.MinVersion > m.MaxVersion {
		return fmt.Errorf("version range %d..%d", m.MinVersion, m.MaxVersion)
	}
	if len(m.Name) > MaxNameLen {
		return fmt.Errorf("name of %d bytes (max %d)", len(m.Name), MaxNameLen)
	}
	return nil
}

// AppendPayload appends the Hello payload.
func (m *Hello) AppendPayload(b []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return b, invalid("Hello: %v", err)
	}
	b = appendU16(b, m.MinVersion)
	b = appendU16(b, m.MaxVersion)
	b = appendU32(b, m.PID)
	b = appendU64(b, uint64(m.Caps))
	b = appendU64(b, m.PIDNamespace)
	b = appendU32(b, m.UID)
	b = appendU32(b, 0)
	b = append(b, m.EngineID[:]...)
	b = appendU16(b, uint16(len(m.Name)))
	return append(b, m.Name...), nil
}

func (m *Hello) decode(d *dec, t Type) error {
	var n Hello
	n.MinVersion = d.u16()
	n.MaxVersion = d.u16()
	n.PID = d.u32()
	n.Caps = Caps(d.u64())
	n.PIDNamespace = d.u64()
	n.UID = d.u32()
	if !d.zeros(4) {
		return malformed("%v: reserved field set", t)
	}
	copy(n.EngineID[:], d.take(16))
	l := int(d.u16())
	if l > MaxNameLen {
		return malformed("%v: name of %d bytes (max %d)", t, l, MaxNameLen)
	}
	name := d.take(l)
	if d.short {
		return malformed("%v: truncated payload", t)
	}
	n.Name = string(name)
	if err := n.check(); err != nil {
		return malformed("%v: %v", t, err)
	}
	*m = n
	return nil
}

// DecodePayload decodes a Hello.
func (m *Hello) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeHello, p); err != nil {
		return err
	}
	d := dec{b: p}
	var n Hello
	if err := n.decode(&d, TypeHello); err != nil {
		return err
	}
	if err := d.done(TypeHello); err != nil {
		return err
	}
	*m = n
	return nil
}

// HelloAck accepts a Hello: the listener's own identity and version range,
// the version chosen for the connection and the capabilities both sides
// will use (a subset of both Hellos' Caps). Build it with [Negotiate].
type HelloAck struct {
	Hello           // the acceptor's identity and version range
	Version  uint16 // chosen protocol version, inside both ranges
	Accepted Caps   // capabilities in use on this connection
}

// Type returns TypeHelloAck.
func (m *HelloAck) Type() Type        { return TypeHelloAck }
func (m *HelloAck) requestID() uint64 { return 0 }

// AppendPayload appends the HelloAck payload: Version, 6 reserved bytes,
// Accepted, then the Hello encoding.
func (m *HelloAck) AppendPayload(b []byte) ([]byte, error) {
	if m.Version < m.MinVersion || m.Version > m.MaxVersion {
		return b, invalid("HelloAck: version %d outside %d..%d", m.Version, m.MinVersion, m.MaxVersion)
	}
	if err := m.check(); err != nil {
		return b, invalid("HelloAck: %v", err)
	}
	b = appendU16(b, m.Version)
	b = append(b, zero8[:6]...)
	b = appendU64(b, uint64(m.Accepted))
	return m.Hello.AppendPayload(b)
}

// DecodePayload decodes a HelloAck.
func (m *HelloAck) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeHelloAck, p); err != nil {
		return err
	}
	d := dec{b: p}
	var n HelloAck
	n.Version = d.u16()
	if !d.zeros(6) {
		return malformed("HelloAck: reserved field set")
	}
	n.Accepted = Caps(d.u64())
	if err := n.Hello.decode(&d, TypeHelloAck); err != nil {
		return err
	}
	if err := d.done(TypeHelloAck); err != nil {
		return err
	}
	if n.Version < n.MinVersion || n.Version > n.MaxVersion {
		return malformed("HelloAck: version %d outside %d..%d", n.Version, n.MinVersion, n.MaxVersion)
	}
	*m = n
	return nil
}

// Negotiate is what a listener does with a peer's Hello: it picks the
// highest protocol version both local and remote speak and the
// capabilities both have, and returns the HelloAck to send. It fails with
// a *VersionError if the ranges do not overlap.
func Negotiate(local, remote Hello) (HelloAck, error) {
	lo, hi := max(local.MinVersion, remote.MinVersion), min(local.MaxVersion, remote.MaxVersion)
	if lo > hi || lo == 0 {
		return HelloAck{}, &VersionError{Got: remote.MaxVersion, Min: local.MinVersion, Max: local.MaxVersion}
	}
	return HelloAck{Hello: local, Version: hi, Accepted: local.Caps & remote.Caps}, nil
}

// CheckAck is what a dialer does with the listener's HelloAck: the chosen
// version must be one local speaks and the accepted capabilities a subset
// of local's.
func CheckAck(local Hello, ack HelloAck) error {
	if ack.Version < local.MinVersion || ack.Version > local.MaxVersion {
		return &VersionError{Got: ack.Version, Min: local.MinVersion, Max: local.MaxVersion}
	}
	if ack.Accepted&^local.Caps != 0 {
		return malformed("HelloAck: accepted capabilities %#x beyond ours %#x", uint64(ack.Accepted), uint64(local.Caps))
	}
	return nil
}

// ---------------------------------------------------------------- Error

// Error reports a failed request (RequestID != 0) or a connection-level
// failure (RequestID 0, e.g. a refused Hello). It is also a Go error.
type Error struct {
	RequestID uint64
	Code      Status // never StatusOK
	Message   string // at most MaxErrorLen bytes; longer messages are cut by NewError
}

// NewError builds an Error, truncating msg to MaxErrorLen bytes.
func NewError(reqID uint64, code Status, msg string) *Error {
	if len(msg) > MaxErrorLen {
		msg = msg[:MaxErrorLen]
	}
	return &Error{RequestID: reqID, Code: code, Message: msg}
}

func (m *Error) Error() string {
	if m.Message == "" {
		return fmt.Sprintf("wire: peer error (request %d): %v", m.RequestID, m.Code)
	}
	return fmt.Sprintf("wire: peer error (request %d): %v: %s", m.RequestID, m.Code, m.Message)
}

// Type returns TypeError.
func (m *Error) Type() Type        { return TypeError }
func (m *Error) requestID() uint64 { return m.RequestID }

// AppendPayload appends the Error payload: Code u32, message length u16,
// 2 reserved bytes, the message.
func (m *Error) AppendPayload(b []byte) ([]byte, error) {
	if m.Code == StatusOK {
		return b, invalid("Error with status ok")
	}
	if len(m.Message) > MaxErrorLen {
		return b, invalid("Error: message of %d bytes (max %d)", len(m.Message), MaxErrorLen)
	}
	b = appendU32(b, uint32(m.Code))
	b = appendU16(b, uint16(len(m.Message)))
	b = appendU16(b, 0)
	return append(b, m.Message...), nil
}

// DecodePayload decodes an Error.
func (m *Error) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeError, p); err != nil {
		return err
	}
	d := dec{b: p}
	code := Status(d.u32())
	l := int(d.u16())
	if !d.zeros(2) {
		return malformed("Error: reserved field set")
	}
	if l > MaxErrorLen {
		return malformed("Error: message of %d bytes (max %d)", l, MaxErrorLen)
	}
	msg := d.take(l)
	if err := d.done(TypeError); err != nil {
		return err
	}
	if code == StatusOK {
		return malformed("Error with status ok")
	}
	*m = Error{RequestID: h.RequestID, Code: code, Message: string(msg)}
	return nil
}

// ---------------------------------------------------------------- Put / Get

// LocalKind says how a request describes the requester's side of the data.
type LocalKind uint8

// Local kinds.
const (
	// LocalInline: the data travels in Data frames on the connection
	// (TCP path): after a Put, the requester sends Data frames with the
	// same request id; a Get is answered with Data frames, then a
	// Completion.
	LocalInline LocalKind = 1
	// LocalKey: the requester exported its buffer (Local.Key); the owner
	// imports it (ImportRequest back to the requester, through its IPC
	// handle cache) and moves the data itself: a memmove for host memory,
	// a DMA when either side is Gaudi memory. The import maps the whole
	// allocation: the owner refuses a key to one larger than Length.
	LocalKey LocalKind = 2
	// LocalRDMA: the requester's side is Length bytes at Addr of a memory
	// region it registered with its RDMA device (RKey: remote read
	// allowed, and remote write for a Get only: a Put's owner only reads
	// it), on an endpoint whose queue pairs are connected (both
	// sides accepted CapRDMA). The owner moves the data itself with RDMA
	// reads (Put) or writes (Get) against that region, staging through its
	// own host memory where its side is Gaudi memory, then answers. The
	// requester's NIC enforces the region's bounds.
	LocalRDMA LocalKind = 3
)

// Local is the requester's description of its own side of a Put or Get.
type Local struct {
	Kind   LocalKind
	Key    RemoteKey // LocalKey only: the requester's buffer
	Offset uint64    // LocalKey only: where in Key's view the data starts
	Addr   uint64    // LocalRDMA only: the region's address of the first byte
	RKey   uint32    // LocalRDMA only: the region's remote key
}

// Request is the body shared by Put and Get: Length bytes at Offset in
// Key's view on the owner's side, and the requester's side in Local.
//
// Decoding validates the encoding only; the owner must still [Verify] Key
// (and Local.Key is verified by the requester when it serves the import),
// check the access flags and call [RemoteKey.Check], answering a failure
// with a Completion or Error status rather than dropping the connection.
type Request struct {
	RequestID uint64
	Key       RemoteKey // the owner's memory (target of a Put, source of a Get)
	Offset    uint64    // within Key's view
	Length    uint64
	Local     Local
}

func (r *Request) appendPayload(b []byte, t Type) ([]byte, error) {
	b, err := r.Key.AppendBinary(b)
	if err != nil {
		return b, fmt.Errorf("%v: %w", t, err)
	}
	b = appendU64(b, r.Offset)
	b = appendU64(b, r.Length)
	b = append(b, byte(r.Local.Kind))
	b = append(b, zero8[:7]...)
	switch r.Local.Kind {
	case LocalInline:
	case LocalKey:
		if b, err = r.Local.Key.AppendBinary(b); err != nil {
			return b, fmt.Errorf("%v: local %w", t, err)
		}
		b = appendU64(b, r.Local.Offset)
	case LocalRDMA:
		if err := checkLocalRDMA(r.Local.Addr, r.Length); err != nil {
			return b, invalid("%v: local %v", t, err)
		}
		b = appendU64(b, r.Local.Addr)
		b = appendU32(b, r.Local.RKey)
		b = appendU32(b, 0)
	default:
		return b, invalid("%v: unknown local kind %d", t, r.Local.Kind)
	}
	return b, nil
}

// checkLocalRDMA validates the requester's region of a LocalRDMA request:
// it must not wrap around the address space.
func checkLocalRDMA(addr, n uint64) error {
	if addr > math.MaxUint64-n {
		return fmt.Errorf("RDMA region [%#x, +%d) wraps", addr, n)
	}
	return nil
}

func (r *Request) decodePayload(h Header, p []byte, t Type) error {
	if err := checkHeader(h, t, p); err != nil {
		return err
	}
	d := dec{b: p}
	n := Request{RequestID: h.RequestID}
	if err := n.Key.decode(&d); err != nil {
		return fmt.Errorf("%v: %w", t, err)
	}
	n.Offset = d.u64()
	n.Length = d.u64()
	n.Local.Kind = LocalKind(d.u8())
	if !d.zeros(7) {
		return malformed("%v: reserved field set", t)
	}
	switch n.Local.Kind {
	case LocalInline:
	case LocalKey:
		if err := n.Local.Key.decode(&d); err != nil {
			return fmt.Errorf("%v: local %w", t, err)
		}
		n.Local.Offset = d.u64()
	case LocalRDMA:
		n.Local.Addr = d.u64()
		n.Local.RKey = d.u32()
		if !d.zeros(4) {
			return malformed("%v: reserved field set", t)
		}
		if err := checkLocalRDMA(n.Local.Addr, n.Length); err != nil && !d.short {
			return malformed("%v: local %v", t, err)
		}
	default:
		if !d.short {
			return malformed("%v: unknown local kind %d", t, n.Local.Kind)
		}
	}
	if err := d.done(t); err != nil {
		return err
	}
	*r = n
	return nil
}

// Put asks the owner of Key to write Length bytes from the requester's
// side (Local) into its memory. The owner answers with a Completion (or
// an Error) carrying the same RequestID.
type Put struct{ Request }

// Type returns TypePut.
func (m *Put) Type() Type        { return TypePut }
func (m *Put) requestID() uint64 { return m.RequestID }

// AppendPayload appends the Put payload: Key (KeySize), Offset, Length,
// local kind u8, 7 reserved bytes, and for LocalKey the local key and
// offset, for LocalRDMA the address u64, the rkey u32 and 4 reserved
// bytes.
func (m *Put) AppendPayload(b []byte) ([]byte, error) { return m.appendPayload(b, TypePut) }

// DecodePayload decodes a Put.
func (m *Put) DecodePayload(h Header, p []byte) error { return m.decodePayload(h, p, TypePut) }

// Get asks the owner of Key to read Length bytes of its memory into the
// requester's side (Local). Same encoding and answer as Put.
type Get struct{ Request }

// Type returns TypeGet.
func (m *Get) Type() Type        { return TypeGet }
func (m *Get) requestID() uint64 { return m.RequestID }

// AppendPayload appends the Get payload (as Put).
func (m *Get) AppendPayload(b []byte) ([]byte, error) { return m.appendPayload(b, TypeGet) }

// DecodePayload decodes a Get.
func (m *Get) DecodePayload(h Header, p []byte) error { return m.decodePayload(h, p, TypeGet) }

// ---------------------------------------------------------------- Completion

// Completion ends a request.
type Completion struct {
	RequestID uint64
	Status    Status
}

// Type returns TypeCompletion.
func (m *Completion) Type() Type        { return TypeCompletion }
func (m *Completion) requestID() uint64 { return m.RequestID }

// AppendPayload appends the Completion payload: Status u32, 4 reserved
// bytes.
func (m *Completion) AppendPayload(b []byte) ([]byte, error) {
	b = appendU32(b, uint32(m.Status))
	return appendU32(b, 0), nil
}

// DecodePayload decodes a Completion.
func (m *Completion) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeCompletion, p); err != nil {
		return err
	}
	d := dec{b: p}
	s := Status(d.u32())
	if !d.zeros(4) {
		return malformed("Completion: reserved field set")
	}
	if err := d.done(TypeCompletion); err != nil {
		return err
	}
	*m = Completion{RequestID: h.RequestID, Status: s}
	return nil
}

// ---------------------------------------------------------------- Invalidate

// Invalidate tells importers that the owner freed an allocation: every
// generation up to Generation of AllocID is gone. Importers drop their
// cached mapping (ipc.HandleCache.Invalidate).
type Invalidate struct {
	AllocID    uint64
	Generation uint64
}

// Type returns TypeInvalidate.
func (m *Invalidate) Type() Type        { return TypeInvalidate }
func (m *Invalidate) requestID() uint64 { return 0 }

// AppendPayload appends the Invalidate payload: AllocID, Generation.
func (m *Invalidate) AppendPayload(b []byte) ([]byte, error) {
	b = appendU64(b, m.AllocID)
	return appendU64(b, m.Generation), nil
}

// DecodePayload decodes an Invalidate.
func (m *Invalidate) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeInvalidate, p); err != nil {
		return err
	}
	d := dec{b: p}
	n := Invalidate{AllocID: d.u64(), Generation: d.u64()}
	if err := d.done(TypeInvalidate); err != nil {
		return err
	}
	*m = n
	return nil
}

// ---------------------------------------------------------------- Import

// ImportRequest asks the owner of Key for a file descriptor of the
// allocation Key names (AllocID, Generation), so the requester can map it
// (host memory: a memfd) or hand it to its NIC (Gaudi memory: a DMA-BUF).
// The whole signed key is sent, not just its ids, so the owner can verify
// that the requester was given the key: a peer can import only what it
// holds a key for. The owner answers with ImportReply (two fds attached)
// or an Error.
type ImportRequest struct {
	RequestID uint64
	Key       RemoteKey
}

// Type returns TypeImportRequest.
func (m *ImportRequest) Type() Type        { return TypeImportRequest }
func (m *ImportRequest) requestID() uint64 { return m.RequestID }

// AppendPayload appends the ImportRequest payload: the key.
func (m *ImportRequest) AppendPayload(b []byte) ([]byte, error) {
	b, err := m.Key.AppendBinary(b)
	if err != nil {
		return b, fmt.Errorf("ImportRequest: %w", err)
	}
	return b, nil
}

// DecodePayload decodes an ImportRequest.
func (m *ImportRequest) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeImportRequest, p); err != nil {
		return err
	}
	var k RemoteKey
	if err := k.UnmarshalBinary(p); err != nil {
		return fmt.Errorf("ImportRequest: %w", err)
	}
	*m = ImportRequest{RequestID: h.RequestID, Key: k}
	return nil
}

// FDKind says what an imported descriptor is.
type FDKind uint8

// Descriptor kinds.
const (
	FDMemfd  FDKind = 1 // a sealed memfd of host memory: map it (ipc.MapShared)
	FDDMABuf FDKind = 2 // a DMA-BUF of device memory: register it with a NIC; never mapped
)

// ImportReply answers an ImportRequest. Its frame carries exactly two fds
// (Header.NumFDs == 2). The first holds the allocation: the Size bytes at
// FileOffset of that file. The second is the allocation's validity flag:
// a one-page memfd sealed so that the importer can map it read-only only
// (F_SEAL_FUTURE_WRITE, ipc.NewValidity), whose first 8 bytes are 0 while
// the allocation lives; the owner sets them before it releases the
// allocation. An importer checks the flag after every copy into or out of
// its mapping and reports the copy stale when it is set: an Invalidate
// may arrive after the importer's next copy, and a copy into memory the
// owner freed must never be reported as done.
type ImportReply struct {
	RequestID  uint64
	AllocID    uint64
	Generation uint64
	Kind       FDKind
	FileOffset uint64
	Size       uint64 // > 0
}

// Type returns TypeImportReply.
func (m *ImportReply) Type() Type        { return TypeImportReply }
func (m *ImportReply) requestID() uint64 { return m.RequestID }

func (m *ImportReply) check() error {
	if m.Kind != FDMemfd && m.Kind != FDDMABuf {
		return fmt.Errorf("unknown fd kind %d", m.Kind)
	}
	if m.Size == 0 || m.FileOffset > math.MaxUint64-m.Size {
		return fmt.Errorf("range [%d, +%d) empty or wrapping", m.FileOffset, m.Size)
	}
	return nil
}

// AppendPayload appends the ImportReply payload: AllocID, Generation,
// FileOffset, Size, kind u8, 7 reserved bytes.
func (m *ImportReply) AppendPayload(b []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return b, invalid("ImportReply: %v", err)
	}
	b = appendU64(b, m.AllocID)
	b = appendU64(b, m.Generation)
	b = appendU64(b, m.FileOffset)
	b = appendU64(b, m.Size)
	b = append(b, byte(m.Kind))
	return append(b, zero8[:7]...), nil
}

// DecodePayload decodes an ImportReply.
func (m *ImportReply) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeImportReply, p); err != nil {
		return err
	}
	d := dec{b: p}
	n := ImportReply{RequestID: h.RequestID, AllocID: d.u64(), Generation: d.u64(), FileOffset: d.u64(), Size: d.u64()}
	n.Kind = FDKind(d.u8())
	if !d.zeros(7) {
		return malformed("ImportReply: reserved field set")
	}
	if err := d.done(TypeImportReply); err != nil {
		return err
	}
	if err := n.check(); err != nil {
		return malformed("ImportReply: %v", err)
	}
	*m = n
	return nil
}

// ---------------------------------------------------------------- Data (Bye: bye.go)

// Data carries bytes of a Put or Get over a transport without shared
// memory (TCP): Bytes belong at Offset of the request's range. Bytes
// aliases the decoded frame (for a Conn: valid until the next Recv).
type Data struct {
	RequestID uint64
	Offset    uint64
	Bytes     []byte // not empty
}

// Type returns TypeData.
func (m *Data) Type() Type        { return TypeData }
func (m *Data) requestID() uint64 { return m.RequestID }

// AppendPayload appends the Data payload: Offset, then the bytes.
func (m *Data) AppendPayload(b []byte) ([]byte, error) {
	if len(m.Bytes) == 0 || len(m.Bytes) > maxDataLength {
		return b, invalid("Data: %d bytes", len(m.Bytes))
	}
	b = appendU64(b, m.Offset)
	return append(b, m.Bytes...), nil
}

// DecodePayload decodes a Data message without copying the bytes.
func (m *Data) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeData, p); err != nil {
		return err
	}
	if len(p) <= 8 {
		return malformed("Data: %d-byte payload", len(p))
	}
	d := dec{b: p}
	off := d.u64()
	*m = Data{RequestID: h.RequestID, Offset: off, Bytes: p[8:len(p):len(p)]}
	return nil
}

// ---------------------------------------------------------------- Heartbeat

// CapUseReport (in both Hellos) says the sender takes a [Heartbeat]
// with Used set: a dialer's operations that sent no frame (one-sided
// RDMA into the listener's memory, Puts through a mapping of it) are then
// reported with its next heartbeat. A Heartbeat with Used goes only to a
// peer that announced it (an older engine rejects its payload).
const CapUseReport Caps = 1 << 12

// Heartbeat is sent on a connection that has been idle for a while, so
// that the peer can tell a silent peer (stopped, partitioned) from an idle
// one. It has no reply. Used (only between peers with [CapUseReport])
// says the sender used the connection's endpoint since its last
// heartbeat without a frame the peer saw: traffic, not idleness.
type Heartbeat struct {
	Used bool
}

// heartbeatUsed is the Heartbeat payload's flag byte for Used.
const heartbeatUsed = 1

// Type returns TypeHeartbeat.
func (m *Heartbeat) Type() Type        { return TypeHeartbeat }
func (m *Heartbeat) requestID() uint64 { return 0 }

// AppendPayload appends the Heartbeat payload: empty, or with Used one
// flag byte (1).
func (m *Heartbeat) AppendPayload(b []byte) ([]byte, error) {
	if m.Used {
		b = append(b, heartbeatUsed)
	}
	return b, nil
}

// DecodePayload decodes a Heartbeat.
func (m *Heartbeat) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeHeartbeat, p); err != nil {
		return err
	}
	switch {
	case len(p) == 0:
		*m = Heartbeat{}
	case len(p) == 1 && p[0] == heartbeatUsed:
		*m = Heartbeat{Used: true}
	case len(p) == 1:
		return malformed("Heartbeat: flags %#x", p[0])
	default:
		return malformed("Heartbeat: %d trailing bytes", len(p)-1)
	}
	return nil
}
