package wire

import "math"

// CapList (in both Hellos) says the sender serves [PutList] and
// [GetList] (answering with [ListReply]): a requester sends them only to
// a peer that announced it, and moves a list element by element (Put,
// Get) otherwise.
const CapList Caps = 1 << 10

// Limits of one list request. A longer list, or one naming more distinct
// keys, is cut into several requests. Both limits keep a request within
// a TCP connection's frame limit (tcp.MaxFrame).
const (
	MaxListEntries = 1024
	MaxListKeys    = 256
)

// ListEntry is one element of a list request: Length bytes at Offset of
// the view of Keys[Key].
type ListEntry struct {
	Key    uint16
	Offset uint64
	Length uint64
}

const (
	listHead   = 8  // key count u16, entry count u16, 4 reserved bytes
	entrySize  = 24 // key index u16, 6 reserved bytes, Offset, Length
	replyHead  = 8  // status count u16, message length u16, 4 reserved bytes
	statusSize = 4
)

// ListRequest is the body of PutList and GetList: a list of ranges of
// the owner's memory, each named by a key of Keys (a key shared by
// several entries travels once), whose bytes travel in Data frames with
// the request's id, entry after entry: entry i's bytes are at stream
// offsets [sum of the lengths before it, +Length); a Data frame may hold
// bytes of several entries (the receiver lands them with a DataSinkV;
// both ends of a list understand such frames). The owner looks every entry up on its own
// (a bad one fails with its status, not the others) and answers once,
// with a ListReply carrying every entry's status.
//
// Decoding validates the encoding only (counts within the limits, every
// key index within Keys, a total length that does not overflow); the
// owner checks each entry against its key.
type ListRequest struct {
	RequestID uint64
	Keys      []RemoteKey // 1..MaxListKeys
	Entries   []ListEntry // 1..MaxListEntries
}

// Total is the sum of the entries' lengths (the bytes of the stream).
func (r *ListRequest) Total() uint64 {
	var n uint64
	for _, e := range r.Entries {
		n += e.Length
	}
	return n
}

func (r *ListRequest) check() error {
	if len(r.Keys) == 0 || len(r.Keys) > MaxListKeys {
		return invalid("list: %d keys (1..%d)", len(r.Keys), MaxListKeys)
	}
	if len(r.Entries) == 0 || len(r.Entries) > MaxListEntries {
		return invalid("list: %d entries (1..%d)", len(r.Entries), MaxListEntries)
	}
	var total uint64
	for i, e := range r.Entries {
		if int(e.Key) >= len(r.Keys) {
			return invalid("list: entry %d names key %d of %d", i, e.Key, len(r.Keys))
		}
		if total > math.MaxUint64-e.Length {
			return invalid("list: total length overflows")
		}
		total += e.Length
	}
	return nil
}

func (r *ListRequest) appendPayload(b []byte, t Type) ([]byte, error) {
	if err := r.check(); err != nil {
		return b, err
	}
	b = appendU16(b, uint16(len(r.Keys)))
	b = appendU16(b, uint16(len(r.Entries)))
	b = appendU32(b, 0)
	for i := range r.Keys {
		var err error
		if b, err = r.Keys[i].AppendBinary(b); err != nil {
			return b, err
		}
	}
	for _, e := range r.Entries {
		b = appendU16(b, e.Key)
		b = append(b, zero8[:6]...)
		b = appendU64(b, e.Offset)
		b = appendU64(b, e.Length)
	}
	return b, nil
}

func (r *ListRequest) decodePayload(h Header, p []byte, t Type) error {
	if err := checkHeader(h, t, p); err != nil {
		return err
	}
	d := dec{b: p}
	nk, ne := int(d.u16()), int(d.u16())
	if !d.zeros(4) {
		return malformed("%v: reserved field set", t)
	}
	if d.short {
		return malformed("%v: truncated payload", t)
	}
	// Every count is checked, and the payload's length against them,
	// before anything is allocated.
	if nk == 0 || nk > MaxListKeys || ne == 0 || ne > MaxListEntries {
		return malformed("%v: %d keys, %d entries (1..%d, 1..%d)", t, nk, ne, MaxListKeys, MaxListEntries)
	}
	if want := listHead + nk*KeySize + ne*entrySize; len(p) != want {
		return malformed("%v: %d-byte payload for %d keys and %d entries (want %d)", t, len(p), nk, ne, want)
	}
	n := ListRequest{RequestID: h.RequestID, Keys: make([]RemoteKey, nk), Entries: make([]ListEntry, ne)}
	for i := range n.Keys {
		if err := n.Keys[i].decode(&d); err != nil {
			return malformed("%v: key %d: %v", t, i, err)
		}
	}
	var total uint64
	for i := range n.Entries {
		e := ListEntry{Key: d.u16()}
		if !d.zeros(6) {
			return malformed("%v: reserved field set", t)
		}
		e.Offset, e.Length = d.u64(), d.u64()
		if int(e.Key) >= nk {
			return malformed("%v: entry %d names key %d of %d", t, i, e.Key, nk)
		}
		if total > math.MaxUint64-e.Length {
			return malformed("%v: total length overflows", t)
		}
		total += e.Length
		n.Entries[i] = e
	}
	if err := d.done(t); err != nil {
		return err
	}
	*r = n
	return nil
}

// PutList asks the owner to write a list of ranges of its memory with
// the bytes that follow in Data frames (see [ListRequest]).
type PutList struct{ ListRequest }

// Type returns TypePutList.
func (m *PutList) Type() Type        { return TypePutList }
func (m *PutList) requestID() uint64 { return m.RequestID }

// AppendPayload appends the PutList payload: key count u16, entry count
// u16, 4 reserved bytes, the keys (KeySize each), then per entry the key
// index u16, 6 reserved bytes, Offset and Length.
func (m *PutList) AppendPayload(b []byte) ([]byte, error) { return m.appendPayload(b, TypePutList) }

// DecodePayload decodes a PutList.
func (m *PutList) DecodePayload(h Header, p []byte) error { return m.decodePayload(h, p, TypePutList) }

// GetList asks the owner to send a list of ranges of its memory, entry
// after entry, in Data frames, then a ListReply (see [ListRequest]); the
// bytes of an entry it refuses are sent as zeros. Same encoding as
// PutList.
type GetList struct{ ListRequest }

// Type returns TypeGetList.
func (m *GetList) Type() Type        { return TypeGetList }
func (m *GetList) requestID() uint64 { return m.RequestID }

// AppendPayload appends the GetList payload (as PutList).
func (m *GetList) AppendPayload(b []byte) ([]byte, error) { return m.appendPayload(b, TypeGetList) }

// DecodePayload decodes a GetList.
func (m *GetList) DecodePayload(h Header, p []byte) error { return m.decodePayload(h, p, TypeGetList) }

// ListReply ends a PutList or GetList: the status of every entry, in
// order, and the message of the first that failed (at most MaxErrorLen
// bytes).
type ListReply struct {
	RequestID uint64
	Statuses  []Status // 1..MaxListEntries
	Message   string
}

// Type returns TypeListReply.
func (m *ListReply) Type() Type        { return TypeListReply }
func (m *ListReply) requestID() uint64 { return m.RequestID }

// AppendPayload appends the ListReply payload: status count u16, message
// length u16, 4 reserved bytes, the statuses (u32 each), the message.
func (m *ListReply) AppendPayload(b []byte) ([]byte, error) {
	if len(m.Statuses) == 0 || len(m.Statuses) > MaxListEntries {
		return b, invalid("ListReply: %d statuses (1..%d)", len(m.Statuses), MaxListEntries)
	}
	if len(m.Message) > MaxErrorLen {
		return b, invalid("ListReply: message of %d bytes (max %d)", len(m.Message), MaxErrorLen)
	}
	b = appendU16(b, uint16(len(m.Statuses)))
	b = appendU16(b, uint16(len(m.Message)))
	b = appendU32(b, 0)
	for _, s := range m.Statuses {
		b = appendU32(b, uint32(s))
	}
	return append(b, m.Message...), nil
}

// DecodePayload decodes a ListReply.
func (m *ListReply) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeListReply, p); err != nil {
		return err
	}
	d := dec{b: p}
	ns, nm := int(d.u16()), int(d.u16())
	if !d.zeros(4) {
		return malformed("ListReply: reserved field set")
	}
	if d.short {
		return malformed("ListReply: truncated payload")
	}
	if ns == 0 || ns > MaxListEntries || nm > MaxErrorLen {
		return malformed("ListReply: %d statuses, %d-byte message", ns, nm)
	}
	if want := replyHead + ns*statusSize + nm; len(p) != want {
		return malformed("ListReply: %d-byte payload, want %d", len(p), want)
	}
	n := ListReply{RequestID: h.RequestID, Statuses: make([]Status, ns)}
	for i := range n.Statuses {
		n.Statuses[i] = Status(d.u32())
	}
	n.Message = string(d.take(nm))
	if err := d.done(TypeListReply); err != nil {
		return err
	}
	*m = n
	return nil
}
