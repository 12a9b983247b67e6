package wire

// CapByeReason (in both Hellos) says the sender takes a [Bye] with a
// Reason. A Bye with a Reason goes only to a peer that announced it (an
// older engine rejects its payload); others get an empty one.
const CapByeReason Caps = 1 << 13

// Bye announces an orderly close: the sender sends nothing more. The
// receiver purges what it cached from the peer. Reason (only to a peer
// with [CapByeReason]; at most MaxErrorLen bytes; "" for none) says why
// the sender closed the connection when its application did not (a
// listener that closed it to make room for another peer).
type Bye struct {
	Reason string
}

// Type returns TypeBye.
func (m *Bye) Type() Type        { return TypeBye }
func (m *Bye) requestID() uint64 { return 0 }

// AppendPayload appends the Bye payload: the Reason's bytes (none for
// no reason).
func (m *Bye) AppendPayload(b []byte) ([]byte, error) {
	if len(m.Reason) > MaxErrorLen {
		return b, invalid("Bye: reason of %d bytes (max %d)", len(m.Reason), MaxErrorLen)
	}
	return append(b, m.Reason...), nil
}

// DecodePayload decodes a Bye.
func (m *Bye) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeBye, p); err != nil {
		return err
	}
	if len(p) > MaxErrorLen {
		return malformed("Bye: reason of %d bytes (max %d)", len(p), MaxErrorLen)
	}
	*m = Bye{Reason: string(p)}
	return nil
}
