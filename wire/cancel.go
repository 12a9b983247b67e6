package wire

// CapCancel (in both Hellos) says the sender understands [Cancel]: a
// requester sends Cancel only to a peer that announced it.
const CapCancel Caps = 1 << 8

// Cancel abandons a request whose data travels in Data frames (the TCP
// path); the requester sends it on the request's connection. The request
// ends with it: the owner sends no reply after it (a reply already on its
// way is dropped by the requester).
//
// For a Put, Sent is the number of bytes whose Data frames precede the
// Cancel on the connection (fewer than the request's Length): the owner
// lands no more bytes, and what it landed is undefined. For a Get, Sent
// is 0: the owner stops sending Data frames for the request (the
// requester drops those already on their way).
type Cancel struct {
	RequestID uint64
	Sent      uint64
}

// Type returns TypeCancel.
func (m *Cancel) Type() Type        { return TypeCancel }
func (m *Cancel) requestID() uint64 { return m.RequestID }

// AppendPayload appends the Cancel payload: Sent u64.
func (m *Cancel) AppendPayload(b []byte) ([]byte, error) { return appendU64(b, m.Sent), nil }

// DecodePayload decodes a Cancel.
func (m *Cancel) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeCancel, p); err != nil {
		return err
	}
	d := dec{b: p}
	sent := d.u64()
	if err := d.done(TypeCancel); err != nil {
		return err
	}
	*m = Cancel{RequestID: h.RequestID, Sent: sent}
	return nil
}
