package wire

// CapMessages (in both Hellos) says the sender exchanges application
// messages: it grants the peer a window with [MsgCredit] as the
// connection starts and accepts [AppMsg] frames within it. A side sends
// AppMsg and MsgCredit only to a peer that announced it.
const CapMessages Caps = 1 << 9

// MaxAppMsg is the largest application message an AppMsg carries.
const MaxAppMsg = 64 << 10

// AppMsg carries one application message (engine.Endpoint.Send). The
// payload is the message's bytes, nothing else (0 to MaxAppMsg bytes).
//
// Flow control is by credit: a receiver grants its peer a number of
// messages and of bytes with [MsgCredit] (a window as the connection
// starts, then what its application took), and each AppMsg spends one
// message and its length in bytes of that credit. An AppMsg beyond the
// credit is a protocol violation: the receiver fails the connection
// instead of queueing it.
type AppMsg struct {
	// Bytes is the message. After DecodePayload it aliases the payload
	// (copy it before the buffer is reused).
	Bytes []byte
}

// Type returns TypeAppMsg.
func (m *AppMsg) Type() Type        { return TypeAppMsg }
func (m *AppMsg) requestID() uint64 { return 0 }

// AppendPayload appends the message's bytes; ErrInvalid beyond MaxAppMsg.
func (m *AppMsg) AppendPayload(b []byte) ([]byte, error) {
	if len(m.Bytes) > MaxAppMsg {
		return b, invalid("AppMsg: %d bytes (max %d)", len(m.Bytes), MaxAppMsg)
	}
	return append(b, m.Bytes...), nil
}

// DecodePayload decodes an AppMsg (Bytes aliases p).
func (m *AppMsg) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeAppMsg, p); err != nil {
		return err
	}
	if len(p) > MaxAppMsg {
		return malformed("AppMsg: %d bytes (max %d)", len(p), MaxAppMsg)
	}
	m.Bytes = p[:len(p):len(p)]
	return nil
}

// MsgCredit grants the peer Msgs more application messages totalling at
// most Bytes more bytes. It has no reply.
type MsgCredit struct {
	Msgs  uint32
	Bytes uint64
}

// Type returns TypeMsgCredit.
func (m *MsgCredit) Type() Type        { return TypeMsgCredit }
func (m *MsgCredit) requestID() uint64 { return 0 }

// AppendPayload appends the MsgCredit payload: Msgs u32, 4 reserved
// bytes, Bytes u64.
func (m *MsgCredit) AppendPayload(b []byte) ([]byte, error) {
	b = appendU32(b, m.Msgs)
	b = appendU32(b, 0)
	return appendU64(b, m.Bytes), nil
}

// DecodePayload decodes a MsgCredit.
func (m *MsgCredit) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeMsgCredit, p); err != nil {
		return err
	}
	d := dec{b: p}
	msgs := d.u32()
	if !d.zeros(4) {
		return malformed("MsgCredit: reserved field set")
	}
	n := d.u64()
	if err := d.done(TypeMsgCredit); err != nil {
		return err
	}
	*m = MsgCredit{Msgs: msgs, Bytes: n}
	return nil
}
