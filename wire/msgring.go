package wire

// CapMsgRing (in both Hellos, on a unix socket with CapFDPassing and
// CapMessages) says the sender can take its application messages through
// a shared-memory ring: instead of the first [MsgCredit], a receiver may
// grant its window with a [MsgRing], whose memfd the peer maps and writes
// its messages into (no AppMsg frames then); credit returns are written
// into the ring's header, and [MsgBell] wakes a side that parked.
const CapMsgRing Caps = 1 << 11

// MsgRing grants the peer a window of Msgs application messages totalling
// Bytes bytes, as the first MsgCredit would, and hands it the ring they
// go through: a memfd (one fd) of a header page and Size bytes of
// records. Sent at most once, by the receiver, as the connection starts.
// It has no reply.
type MsgRing struct {
	Msgs  uint32
	Bytes uint64
	Size  uint64 // the ring's record area, after its header page
}

// Type returns TypeMsgRing.
func (m *MsgRing) Type() Type        { return TypeMsgRing }
func (m *MsgRing) requestID() uint64 { return 0 }

// AppendPayload appends the MsgRing payload: Msgs u32, 4 reserved bytes,
// Bytes u64, Size u64.
func (m *MsgRing) AppendPayload(b []byte) ([]byte, error) {
	b = appendU32(b, m.Msgs)
	b = appendU32(b, 0)
	b = appendU64(b, m.Bytes)
	return appendU64(b, m.Size), nil
}

// DecodePayload decodes a MsgRing.
func (m *MsgRing) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeMsgRing, p); err != nil {
		return err
	}
	d := dec{b: p}
	msgs := d.u32()
	if !d.zeros(4) {
		return malformed("MsgRing: reserved field set")
	}
	n := d.u64()
	size := d.u64()
	if err := d.done(TypeMsgRing); err != nil {
		return err
	}
	*m = MsgRing{Msgs: msgs, Bytes: n, Size: size}
	return nil
}

// MsgBell tells a peer sharing a message ring to look at it: a message
// was written while its receiver was parked, or credit was returned while
// its sender waited. A dialer also sends one in place of a Heartbeat when
// it used the connection's endpoint since the last (Puts through its
// mapping of the peer's memory send no frame) and the peer did not
// announce [CapUseReport] (else it sends a [Heartbeat] with Used): the
// bell is traffic, not idleness. It has an empty payload and no reply.
type MsgBell struct{}

// Type returns TypeMsgBell.
func (m *MsgBell) Type() Type        { return TypeMsgBell }
func (m *MsgBell) requestID() uint64 { return 0 }

// AppendPayload appends nothing: MsgBell has an empty payload.
func (m *MsgBell) AppendPayload(b []byte) ([]byte, error) { return b, nil }

// DecodePayload decodes a MsgBell.
func (m *MsgBell) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeMsgBell, p); err != nil {
		return err
	}
	if len(p) != 0 {
		return malformed("MsgBell: %d trailing bytes", len(p))
	}
	return nil
}
