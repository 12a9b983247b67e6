package wire

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// listFrame encodes a valid PutList of n entries over one key.
func listFrame(t *testing.T, n int) []byte {
	t.Helper()
	r := ListRequest{RequestID: 3, Keys: []RemoteKey{testKey()}, Entries: make([]ListEntry, n)}
	for i := range r.Entries {
		r.Entries[i] = ListEntry{Offset: uint64(i) * 64, Length: 64}
	}
	f, err := AppendFrame(nil, &PutList{r})
	require.NoError(t, err)
	return f
}

// TestListDecodeRefuses: every limit of the list messages is checked,
// and the payload's length against the counts, before anything is
// allocated.
func TestListDecodeRefuses(t *testing.T) {
	good := listFrame(t, 4)
	p := good[HeaderSize:]
	at16 := func(off int, v uint16) []byte {
		q := bytes.Clone(p)
		binary.LittleEndian.PutUint16(q[off:], v)
		return q
	}
	at64 := func(off int, v uint64) []byte {
		q := bytes.Clone(p)
		binary.LittleEndian.PutUint64(q[off:], v)
		return q
	}
	entry := func(i int) int { return listHead + KeySize + i*entrySize }
	reply := func(ns, nm uint16, tail int) []byte {
		b := appendU16(nil, ns)
		b = appendU16(b, nm)
		return append(append(b, 0, 0, 0, 0), make([]byte, tail)...)
	}
	big := make([]byte, listHead+MaxListKeys*KeySize+MaxListEntries*entrySize)
	binary.LittleEndian.PutUint16(big, MaxListKeys+1)
	binary.LittleEndian.PutUint16(big[2:], MaxListEntries)
	for _, tc := range []struct {
		name    string
		ty      Type
		payload []byte
	}{
		{"no keys", TypePutList, at16(0, 0)},
		{"no entries", TypeGetList, at16(2, 0)},
		{"keys over the limit", TypePutList, big},
		{"entries over the limit", TypePutList, at16(2, MaxListEntries+1)},
		{"more entries than bytes", TypePutList, at16(2, 5)},
		{"more keys than bytes", TypePutList, at16(0, 2)},
		{"huge counts, tiny payload", TypePutList, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}},
		{"truncated head", TypePutList, p[:5]},
		{"trailing byte", TypePutList, append(bytes.Clone(p), 0)},
		{"head reserved", TypePutList, func() []byte { q := bytes.Clone(p); q[5] = 1; return q }()},
		{"entry reserved", TypePutList, func() []byte { q := bytes.Clone(p); q[entry(1)+3] = 1; return q }()},
		{"key index beyond", TypePutList, at16(entry(2), 1)},
		{"bad key", TypeGetList, func() []byte { q := bytes.Clone(p); q[listHead] = 9; return q }()},
		{"total overflows", TypePutList, at64(entry(3)+16, math.MaxUint64-10)},
		{"reply no statuses", TypeListReply, reply(0, 0, 0)},
		{"reply statuses over the limit", TypeListReply, reply(MaxListEntries+1, 0, (MaxListEntries+1)*4)},
		{"reply message over the limit", TypeListReply, reply(1, MaxErrorLen+1, 4+MaxErrorLen+1)},
		{"reply short", TypeListReply, reply(3, 0, 8)},
		{"reply trailing", TypeListReply, reply(1, 0, 5)},
		{"reply huge count, tiny payload", TypeListReply, reply(0xffff, 0xffff, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, m, err := Decode(rawFrame(Header{Type: tc.ty, RequestID: 3}, tc.payload), 1<<22)
			require.ErrorIs(t, err, ErrMalformed)
			require.Nil(t, m)
		})
	}
	// The largest list fits a TCP connection's frames (64 KiB of message
	// and room to spare).
	r := ListRequest{RequestID: 1, Keys: make([]RemoteKey, MaxListKeys), Entries: make([]ListEntry, MaxListEntries)}
	for i := range r.Keys {
		r.Keys[i] = testKey()
	}
	f, err := AppendFrame(nil, &PutList{r})
	require.NoError(t, err)
	require.Less(t, len(f), MaxAppMsg)
}
