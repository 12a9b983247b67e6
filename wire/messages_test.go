package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoundTripEveryMessage(t *testing.T) {
	seen := map[Type]bool{}
	for _, m := range sampleMessages() {
		t.Run(m.Type().String(), func(t *testing.T) {
			seen[m.Type()] = true
			frame, err := AppendFrame([]byte("prefix"), m)
			require.NoError(t, err)
			require.Equal(t, "prefix", string(frame[:6]), "AppendFrame must append")
			frame = frame[6:]

			h, got, err := Decode(frame, 0)
			require.NoError(t, err)
			require.Equal(t, m.Type(), h.Type)
			require.Equal(t, Version, h.Version)
			require.Equal(t, m.Type().FDs(), int(h.NumFDs))
			require.Equal(t, m.requestID(), h.RequestID)
			require.Equal(t, uint32(len(frame)-HeaderSize), h.Length)
			require.True(t, reflect.DeepEqual(m, got), "decoded %#v\nwant    %#v", got, m)

			// Decoding into a message of one's own via the payload.
			n := NewMessage(h.Type)
			require.NoError(t, n.DecodePayload(h, frame[HeaderSize:]))
			again, err := AppendFrame(nil, n)
			require.NoError(t, err)
			require.Equal(t, frame, again)
		})
	}
	for ty := TypeHello; ty <= typeMax; ty++ {
		require.True(t, seen[ty], "no sample of %v", ty)
	}
}

func TestHelloAckIsNotHello(t *testing.T) {
	var a HelloAck
	require.Equal(t, TypeHelloAck, a.Type())
	// A Hello frame must not decode as HelloAck and vice versa.
	f, err := AppendFrame(nil, &Hello{MinVersion: 1, MaxVersion: 1})
	require.NoError(t, err)
	h, p, err := DecodeFrame(f, 0)
	require.NoError(t, err)
	require.ErrorIs(t, a.DecodePayload(h, p), ErrMalformed)
}

func TestEncodeRefusesInvalid(t *testing.T) {
	k := testKey()
	bad := k
	bad.MemType = 9
	for _, tc := range []struct {
		name string
		m    Message
	}{
		{"hello name too long", &Hello{MinVersion: 1, MaxVersion: 1, Name: strings.Repeat("x", MaxNameLen+1)}},
		{"hello version range", &Hello{MinVersion: 2, MaxVersion: 1}},
		{"hello version zero", &Hello{}},
		{"ack version outside", &HelloAck{Hello: Hello{MinVersion: 1, MaxVersion: 1}, Version: 2}},
		{"error ok", &Error{Code: StatusOK}},
		{"error too long", &Error{Code: StatusInternal, Message: strings.Repeat("x", MaxErrorLen+1)}},
		{"key memtype", &bad},
		{"put bad key", &Put{Request{Key: bad, Local: Local{Kind: LocalInline}}}},
		{"put bad local kind", &Put{Request{Key: k, Local: Local{Kind: 7}}}},
		{"get bad local key", &Get{Request{Key: k, Local: Local{Kind: LocalKey, Key: bad}}}},
		{"import request bad key", &ImportRequest{Key: bad}},
		{"import reply kind", &ImportReply{Kind: 0, Size: 1}},
		{"import reply empty", &ImportReply{Kind: FDMemfd}},
		{"import reply wraps", &ImportReply{Kind: FDMemfd, FileOffset: math.MaxUint64, Size: 2}},
		{"data empty", &Data{}},
		{"app message too large", &AppMsg{Bytes: make([]byte, MaxAppMsg+1)}},
		{"list no keys", &PutList{ListRequest{Entries: []ListEntry{{}}}}},
		{"list no entries", &GetList{ListRequest{Keys: []RemoteKey{k}}}},
		{"list too many entries", &PutList{ListRequest{Keys: []RemoteKey{k}, Entries: make([]ListEntry, MaxListEntries+1)}}},
		{"list too many keys", &PutList{ListRequest{Keys: make([]RemoteKey, MaxListKeys+1), Entries: []ListEntry{{}}}}},
		{"list key index", &PutList{ListRequest{Keys: []RemoteKey{k}, Entries: []ListEntry{{Key: 1}}}}},
		{"list bad key", &PutList{ListRequest{Keys: []RemoteKey{bad}, Entries: []ListEntry{{}}}}},
		{"list overflow", &PutList{ListRequest{Keys: []RemoteKey{k}, Entries: []ListEntry{{Length: math.MaxUint64}, {Length: 1}}}}},
		{"list reply empty", &ListReply{}},
		{"list reply message", &ListReply{Statuses: []Status{StatusOK}, Message: strings.Repeat("x", MaxErrorLen+1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := AppendFrame([]byte("x"), tc.m)
			require.ErrorIs(t, err, ErrInvalid)
			require.Equal(t, "x", string(b), "a failed encode must not grow the buffer")
		})
	}
	require.Equal(t, "request 4", strings.TrimPrefix((&Error{RequestID: 4, Code: StatusStale}).Error(), "wire: peer error (")[:9])
	require.Len(t, NewError(1, StatusInternal, strings.Repeat("y", 5000)).Message, MaxErrorLen)
}

// TestMalformed feeds broken frames to Decode: every one must fail with the
// expected typed error.
func TestMalformed(t *testing.T) {
	k := testKey()
	good := func(m Message) []byte {
		f, err := AppendFrame(nil, m)
		require.NoError(t, err)
		return f
	}
	put := good(&Put{Request{RequestID: 1, Key: k, Length: 8, Local: Local{Kind: LocalInline}}})
	hello := good(&Hello{MinVersion: 1, MaxVersion: 1, Name: "abc"})
	errFrame := good(&Error{RequestID: 1, Code: StatusInternal, Message: "abc"})
	keyFrame := good(&k)
	keyAt := func(f []byte, off int, v byte) []byte { // edit byte off of the key payload
		f = bytes.Clone(f)
		f[HeaderSize+off] = v
		return f
	}
	u64At := func(f []byte, off int, v uint64) []byte {
		f = bytes.Clone(f)
		binary.LittleEndian.PutUint64(f[HeaderSize+off:], v)
		return f
	}

	for _, tc := range []struct {
		name  string
		frame []byte
		max   int
		want  error
	}{
		{"empty", nil, 0, ErrMalformed},
		{"truncated header", put[:HeaderSize-1], 0, ErrMalformed},
		{"bad magic", putU32(put, 0, 0xdeadbeef), 0, ErrMalformed},
		{"bad version", func() []byte { f := bytes.Clone(put); f[4] = 9; return f }(), 0, ErrVersion},
		{"version zero", func() []byte { f := bytes.Clone(put); f[4] = 0; return f }(), 0, ErrVersion},
		{"unknown type", func() []byte { f := bytes.Clone(put); f[6] = 200; return f }(), 0, ErrMalformed},
		{"type zero", func() []byte { f := bytes.Clone(put); f[6] = 0; return f }(), 0, ErrMalformed},
		{"flags", func() []byte { f := bytes.Clone(put); f[7] = 1; return f }(), 0, ErrMalformed},
		{"reserved header", func() []byte { f := bytes.Clone(put); f[15] = 1; return f }(), 0, ErrMalformed},
		{"length > max", putU32(put, 8, MaxFrame), 0, ErrTooLarge},
		{"length > small max", put, 64, ErrTooLarge},
		{"length overflow", putU32(put, 8, math.MaxUint32), 0, ErrTooLarge},
		{"length overflow, huge max", putU32(put, 8, math.MaxUint32), math.MaxInt, ErrMalformed},
		{"length short of payload", putU32(put, 8, uint32(len(put)-HeaderSize-1)), 0, ErrMalformed},
		{"length beyond frame", putU32(put, 8, uint32(len(put)-HeaderSize+1)), 0, ErrMalformed},
		{"fd count too large", func() []byte { f := bytes.Clone(put); f[12] = 254; return f }(), 0, ErrMalformed},
		{"fd count mismatch (put with fd)", func() []byte { f := bytes.Clone(put); f[12] = 1; return f }(), 0, ErrMalformed},
		{"fd count mismatch (reply without fd)", rawFrame(Header{Type: TypeImportReply, RequestID: 1},
			good(&ImportReply{Kind: FDMemfd, Size: 1})[HeaderSize:]), 0, ErrMalformed},
		{"request id on unsolicited", func() []byte { f := bytes.Clone(hello); f[16] = 1; return f }(), 0, ErrMalformed},
		{"hello name too long", func() []byte {
			p := bytes.Clone(hello[HeaderSize:])
			binary.LittleEndian.PutUint16(p[helloFixed-2:], MaxNameLen+1)
			p = append(p, bytes.Repeat([]byte("x"), MaxNameLen+1-3)...)
			return rawFrame(Header{Type: TypeHello}, p)
		}(), 0, ErrMalformed},
		{"hello name length beyond payload", func() []byte {
			p := bytes.Clone(hello[HeaderSize:])
			binary.LittleEndian.PutUint16(p[helloFixed-2:], 4)
			return rawFrame(Header{Type: TypeHello}, p)
		}(), 0, ErrMalformed},
		{"hello trailing byte", rawFrame(Header{Type: TypeHello}, append(bytes.Clone(hello[HeaderSize:]), 0)), 0, ErrMalformed},
		{"hello bad range", func() []byte { f := bytes.Clone(hello); f[HeaderSize] = 2; return f }(), 0, ErrMalformed},
		{"hello reserved", func() []byte { f := bytes.Clone(hello); f[HeaderSize+28] = 1; return f }(), 0, ErrMalformed},
		{"error message too long", func() []byte {
			p := bytes.Clone(errFrame[HeaderSize:])
			binary.LittleEndian.PutUint16(p[4:], MaxErrorLen+1)
			p = append(p, bytes.Repeat([]byte("x"), MaxErrorLen+1-3)...)
			return rawFrame(Header{Type: TypeError, RequestID: 1}, p)
		}(), math.MaxInt32, ErrMalformed},
		{"error ok status", rawFrame(Header{Type: TypeError, RequestID: 1}, make([]byte, 8)), 0, ErrMalformed},
		{"key short", keyFrame[:len(keyFrame)-1], 0, ErrMalformed},
		{"key version", keyAt(keyFrame, 0, KeyVersion+1), 0, ErrMalformed},
		{"key version 1", keyAt(keyFrame, 0, 1), 0, ErrMalformed},
		{"key memtype", keyAt(keyFrame, 1, 3), 0, ErrMalformed},
		{"key flags", keyAt(keyFrame, 2, 0x80), 0, ErrMalformed},
		{"key no flags", keyAt(keyFrame, 2, 0), 0, ErrMalformed},
		{"key host with device", keyAt(keyFrame, 4, 0), 0, ErrMalformed},
		{"key reserved", keyAt(keyFrame, 6, 1), 0, ErrMalformed},
		{"key zero length", u64At(keyFrame, 64, 0), 0, ErrMalformed},
		{"key range overflow", u64At(keyFrame, 56, math.MaxUint64-10), 0, ErrMalformed},
		{"key view beyond", u64At(keyFrame, 112, 1), 0, ErrMalformed},
		{"key view overflow", u64At(u64At(keyFrame, 112, math.MaxUint64), 120, 2), 0, ErrMalformed},
		{"key empty view", u64At(keyFrame, 120, 0), 0, ErrMalformed},
		{"key empty grant", u64At(keyFrame, 88, 0), 0, ErrMalformed},
		{"key grant beyond", u64At(keyFrame, 80, 1), 0, ErrMalformed},
		{"key grant overflow", u64At(u64At(keyFrame, 80, math.MaxUint64), 88, 2), 0, ErrMalformed},
		{"put local kind", func() []byte { f := bytes.Clone(put); f[HeaderSize+KeySize+16] = 9; return f }(), 0, ErrMalformed},
		{"put local kind key but missing", func() []byte { f := bytes.Clone(put); f[HeaderSize+KeySize+16] = byte(LocalKey); return f }(), 0, ErrMalformed},
		{"put reserved", func() []byte { f := bytes.Clone(put); f[HeaderSize+KeySize+17] = 1; return f }(), 0, ErrMalformed},
		{"put trailing", rawFrame(Header{Type: TypePut, RequestID: 1}, append(bytes.Clone(put[HeaderSize:]), 1)), 0, ErrMalformed},
		{"completion reserved", rawFrame(Header{Type: TypeCompletion, RequestID: 1}, []byte{0, 0, 0, 0, 0, 0, 0, 1}), 0, ErrMalformed},
		{"completion short", rawFrame(Header{Type: TypeCompletion, RequestID: 1}, []byte{0, 0, 0}), 0, ErrMalformed},
		{"cancel short", rawFrame(Header{Type: TypeCancel, RequestID: 1}, []byte{0, 0, 0}), 0, ErrMalformed},
		{"cancel trailing", rawFrame(Header{Type: TypeCancel, RequestID: 1}, make([]byte, 9)), 0, ErrMalformed},
		{"invalidate long", rawFrame(Header{Type: TypeInvalidate}, make([]byte, 17)), 0, ErrMalformed},
		{"import reply size zero", rawFrame(Header{Type: TypeImportReply, RequestID: 1, NumFDs: 1},
			append(make([]byte, 32), byte(FDMemfd), 0, 0, 0, 0, 0, 0, 0)), 0, ErrMalformed},
		{"bye reason too long", rawFrame(Header{Type: TypeBye}, make([]byte, MaxErrorLen+1)), 0, ErrMalformed},
		{"heartbeat flags zero", rawFrame(Header{Type: TypeHeartbeat}, []byte{0}), 0, ErrMalformed},
		{"heartbeat unknown flag", rawFrame(Header{Type: TypeHeartbeat}, []byte{3}), 0, ErrMalformed},
		{"heartbeat trailing", rawFrame(Header{Type: TypeHeartbeat}, []byte{1, 0}), 0, ErrMalformed},
		{"heartbeat with request id", rawFrame(Header{Type: TypeHeartbeat, RequestID: 1}, []byte{1}), 0, ErrMalformed},
		{"data empty", rawFrame(Header{Type: TypeData, RequestID: 1}, make([]byte, 8)), 0, ErrMalformed},
		{"app message too large", rawFrame(Header{Type: TypeAppMsg}, make([]byte, MaxAppMsg+1)), 0, ErrMalformed},
		{"app message with request id", rawFrame(Header{Type: TypeAppMsg, RequestID: 3}, []byte("hi")), 0, ErrMalformed},
		{"credit short", rawFrame(Header{Type: TypeMsgCredit}, make([]byte, 15)), 0, ErrMalformed},
		{"credit trailing", rawFrame(Header{Type: TypeMsgCredit}, make([]byte, 17)), 0, ErrMalformed},
		{"credit reserved", rawFrame(Header{Type: TypeMsgCredit}, []byte{1, 0, 0, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0}), 0, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, m, err := Decode(tc.frame, tc.max)
			require.ErrorIs(t, err, tc.want)
			require.Nil(t, m)
		})
	}
}

func TestForgedKey(t *testing.T) {
	k := testKey()
	require.NoError(t, Verify(&k, testSecret))

	for name, edit := range map[string]func(*RemoteKey){
		"length":     func(k *RemoteKey) { k.Length *= 2; k.GrantLen, k.Len = k.Length, k.Length },
		"base":       func(k *RemoteKey) { k.Base += 4096 },
		"alloc":      func(k *RemoteKey) { k.AllocID++ },
		"generation": func(k *RemoteKey) { k.Generation++ },
		"flags":      func(k *RemoteKey) { k.Flags = KeyWrite },
		"owner":      func(k *RemoteKey) { k.Owner[0] ^= 1 },
		"pid":        func(k *RemoteKey) { k.OwnerPID++ },
		"rkey":       func(k *RemoteKey) { k.RKey++ },
		"lane rkey":  func(k *RemoteKey) { k.NICRKeys[1]++ },
		"mac":        func(k *RemoteKey) { k.MAC[15] ^= 1 },
		"memtype":    func(k *RemoteKey) { k.MemType, k.Device = MemGaudi, 0 },
		"grant":      func(k *RemoteKey) { k.GrantOffset, k.GrantLen, k.Offset, k.Len = 4096, 4096, 4096, 4096 },
	} {
		t.Run(name, func(t *testing.T) {
			f := k
			edit(&f)
			require.ErrorIs(t, Verify(&f, testSecret), ErrBadSignature)
			// And through the encoding, as a peer would send it.
			b, err := f.MarshalBinary()
			require.NoError(t, err)
			var g RemoteKey
			require.NoError(t, g.UnmarshalBinary(b))
			require.ErrorIs(t, Verify(&g, testSecret), ErrBadSignature)
		})
	}
	other := []byte("another engine's secret, 32 byte")
	require.ErrorIs(t, Verify(&k, other), ErrBadSignature)
	require.ErrorIs(t, Verify(&k, []byte("short")), ErrInvalid)
	require.ErrorIs(t, Sign(&k, nil), ErrInvalid)

	// A slice (a narrower grant, derived without the secret) verifies, and
	// so does a slice of it (a narrower view in the same grant).
	s, err := k.Slice(100, 200)
	require.NoError(t, err)
	require.NoError(t, Verify(&s, testSecret))
	ss, err := s.Slice(10, 20)
	require.NoError(t, err)
	require.NoError(t, Verify(&ss, testSecret))
	// Widening the grant of a slice (issue 16: a key narrowed to
	// [8192, +4096) re-encoded as [0, +1 MiB)) fails verification.
	narrow, err := k.Slice(8192, 4096)
	require.NoError(t, err)
	for _, g := range [][2]uint64{{0, 1 << 20}, {0, 8192 + 4096}, {8192, 8192}, {4096, 8192}} {
		w := narrow
		w.GrantOffset, w.GrantLen, w.Offset, w.Len = g[0], g[1], g[0], g[1]
		b, err := w.MarshalBinary()
		require.NoError(t, err)
		var d RemoteKey
		require.NoError(t, d.UnmarshalBinary(b))
		require.ErrorIs(t, Verify(&d, testSecret), ErrBadSignature, "grant %v", g)
	}
	// A view edited beyond the grant does not even decode.
	w := narrow
	w.Offset, w.Len = 0, 1<<20
	_, err = w.MarshalBinary()
	require.ErrorIs(t, err, ErrInvalid)

	// Signer agrees with Sign/Verify.
	sg, err := NewSigner(testSecret)
	require.NoError(t, err)
	require.NoError(t, sg.Verify(&k))
	f := k
	f.Generation++
	require.ErrorIs(t, sg.Verify(&f), ErrBadSignature)
	require.NoError(t, sg.Sign(&f))
	require.NoError(t, Verify(&f, testSecret))
	_, err = NewSigner([]byte("short"))
	require.ErrorIs(t, err, ErrInvalid)
	invalidKey := RemoteKey{}
	require.ErrorIs(t, sg.Sign(&invalidKey), ErrInvalid)
	require.ErrorIs(t, sg.Verify(&invalidKey), ErrMalformed)
}

func TestKeySliceAndCheck(t *testing.T) {
	k := testKey() // view = whole 1 MiB allocation
	const L = 1 << 20
	for _, tc := range []struct {
		name   string
		off, n uint64
		ok     bool
	}{
		{"whole", 0, L, true},
		{"first byte", 0, 1, true},
		{"last byte", L - 1, 1, true},
		{"empty", 0, 0, false},
		{"one past", L, 1, false},
		{"too long", 1, L, false},
		{"overflow", 2, math.MaxUint64, false},
		{"offset overflow", math.MaxUint64, 2, false},
		{"both huge", math.MaxUint64, math.MaxUint64, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := k.Check(tc.off, tc.n)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrOutOfRange)
			var re *RangeError
			require.True(t, errors.As(err, &re))
		})
	}

	s, err := k.Slice(4096, 8192)
	require.NoError(t, err)
	require.Equal(t, uint64(4096), s.Offset)
	require.Equal(t, uint64(8192), s.Len)
	require.NotEqual(t, k.MAC, s.MAC, "a narrower grant has a derived MAC")
	require.Equal(t, uint64(4096), s.GrantOffset)
	require.Equal(t, uint64(8192), s.GrantLen)
	ss, err := s.Slice(100, 50)
	require.NoError(t, err)
	start, err := ss.Span(10, 40)
	require.NoError(t, err)
	require.Equal(t, uint64(4096+100+10), start)
	require.ErrorIs(t, ss.Check(10, 41), ErrOutOfRange)
	_, err = s.Slice(8192, 1)
	require.ErrorIs(t, err, ErrOutOfRange)
	_, err = s.Slice(0, 0)
	require.ErrorIs(t, err, ErrOutOfRange)

	// A hand-edited view beyond the signed length is refused by Check even
	// though the MAC still verifies (the view is not signed).
	e := k
	e.Offset, e.Len = L-10, 100
	require.NoError(t, Verify(&e, testSecret))
	require.ErrorIs(t, e.Check(0, 1), ErrOutOfRange)
	e.Offset, e.Len = math.MaxUint64, 2
	require.ErrorIs(t, e.Check(0, 1), ErrOutOfRange)

	require.True(t, k.Allows(KeyRead|KeyWrite))
	g := testGaudiKey()
	require.True(t, g.Allows(KeyRead))
	require.False(t, g.Allows(KeyWrite))
	require.False(t, g.Allows(0))
}

func TestKeyMarshal(t *testing.T) {
	for _, k := range []RemoteKey{testKey(), testGaudiKey()} {
		b, err := k.MarshalBinary()
		require.NoError(t, err)
		require.Len(t, b, KeySize)
		var g RemoteKey
		require.NoError(t, g.UnmarshalBinary(b))
		require.Equal(t, k, g)
	}
	var g RemoteKey
	require.ErrorIs(t, g.UnmarshalBinary(make([]byte, KeySize+1)), ErrMalformed)
	require.ErrorIs(t, g.UnmarshalBinary(make([]byte, KeySize)), ErrMalformed)
	require.Equal(t, RemoteKey{}, g, "a failed decode leaves the key unchanged")
}

func TestNegotiate(t *testing.T) {
	local := Hello{MinVersion: 1, MaxVersion: 1, Caps: CapFDPassing | CapSharedHost}
	remote := Hello{MinVersion: 1, MaxVersion: 5, Caps: CapFDPassing | CapRDMA | 1<<50}
	ack, err := Negotiate(local, remote)
	require.NoError(t, err)
	require.Equal(t, uint16(1), ack.Version)
	require.Equal(t, CapFDPassing, ack.Accepted)
	require.NoError(t, CheckAck(remote, ack))

	_, err = Negotiate(local, Hello{MinVersion: 2, MaxVersion: 3})
	require.ErrorIs(t, err, ErrVersion)
	var ve *VersionError
	require.True(t, errors.As(err, &ve))

	require.ErrorIs(t, CheckAck(Hello{MinVersion: 2, MaxVersion: 2}, ack), ErrVersion)
	bad := ack
	bad.Accepted = CapDMABuf
	require.ErrorIs(t, CheckAck(remote, bad), ErrMalformed)
}

func TestStrings(t *testing.T) {
	require.Equal(t, "Put", TypePut.String())
	require.Equal(t, "Type(99)", Type(99).String())
	require.Equal(t, "stale", StatusStale.String())
	require.Equal(t, "status 77", Status(77).String())
	require.Equal(t, "gaudi", MemGaudi.String())
	require.Equal(t, "MemType(0)", MemType(0).String())
	require.Equal(t, "0102030405060708090a0b0c0d0e0f10", testKey().Owner.String())
}
