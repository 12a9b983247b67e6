package wire

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds arbitrary bytes (1) to Decode as a whole frame, (2) to
// every message decoder as a payload under a header of that type, and (3)
// to RemoteKey.UnmarshalBinary. Nothing may panic, and every successful
// decode must re-encode to exactly the input (decoding is canonical).
func FuzzDecode(f *testing.F) {
	for _, m := range sampleMessages() {
		fr, err := AppendFrame(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(fr)
		f.Add(fr[HeaderSize:])
	}
	if sk, err := testKey().Slice(8192, 4096); err == nil {
		b, _ := sk.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))

	f.Fuzz(func(t *testing.T, data []byte) {
		// 1. A whole frame.
		if h, m, err := Decode(data, 0); err == nil {
			again, err := AppendFrame(nil, m)
			if err != nil {
				t.Fatalf("decoded %v does not re-encode: %v", h.Type, err)
			}
			if !bytes.Equal(again, data) {
				t.Fatalf("%v round trip:\n in  %x\n out %x", h.Type, data, again)
			}
		}

		// 2. The bytes as the payload of every type.
		for ty := TypeHello; ty <= typeMax; ty++ {
			h := Header{Version: Version, Type: ty, Length: uint32(len(data)), NumFDs: uint16(ty.FDs())}
			if ty.hasRequestID() {
				h.RequestID = 42
			}
			m := NewMessage(ty)
			if err := m.DecodePayload(h, data); err != nil {
				continue
			}
			if m.requestID() != h.RequestID {
				t.Fatalf("%v: request id %d, header %d", ty, m.requestID(), h.RequestID)
			}
			p, err := m.AppendPayload(nil)
			if err != nil {
				t.Fatalf("decoded %v does not re-encode: %v", ty, err)
			}
			if !bytes.Equal(p, data) {
				t.Fatalf("%v payload round trip:\n in  %x\n out %x", ty, data, p)
			}
		}

		// 3. A key: decode, re-encode, and exercise the range helpers.
		var k RemoteKey
		if err := k.UnmarshalBinary(data); err == nil {
			b, err := k.MarshalBinary()
			if err != nil || !bytes.Equal(b, data) {
				t.Fatalf("key round trip: %v\n in  %x\n out %x", err, data, b)
			}
			if err := Verify(&k, testSecret); err == nil && !signedBySeed(data) {
				t.Fatalf("fuzzer forged a MAC: %x", data)
			}
			if err := k.Check(0, k.Len); err != nil {
				t.Fatalf("a decoded key's own view fails Check: %v", err)
			}
			for _, r := range [][2]uint64{{k.Len, 1}, {k.Len - 1, 2}, {^uint64(0), 1}, {1, ^uint64(0)}} {
				if k.Check(r[0], r[1]) == nil {
					t.Fatalf("Check(%d, %d) passed for view %d", r[0], r[1], k.Len)
				}
			}
			s, err := k.Slice(k.Len/2, k.Len-k.Len/2)
			if err != nil || s.Check(0, s.Len) != nil {
				t.Fatalf("slice of a valid key: %v", err)
			}
			// A slice of a key that verifies verifies, and its grant can
			// never be widened back (issue 16: views are enforced).
			if Verify(&k, testSecret) == nil {
				if err := Verify(&s, testSecret); err != nil {
					t.Fatalf("slice of a verified key: %v", err)
				}
				if s.GrantLen < k.GrantLen {
					w := s
					w.GrantOffset, w.GrantLen = k.GrantOffset, k.GrantLen
					if Verify(&w, testSecret) == nil {
						t.Fatalf("a widened grant verifies: %+v", w)
					}
				}
			}
		}
	})
}

// signedBySeed reports whether an encoded key's signed part and MAC are
// those of a key the tests signed (the view may differ).
func signedBySeed(enc []byte) bool {
	sk, _ := testKey().Slice(8192, 4096)
	for _, k := range []RemoteKey{testKey(), testGaudiKey(), sk} {
		b, _ := k.MarshalBinary()
		if bytes.Equal(b[:keyView], enc[:keyView]) {
			return true
		}
	}
	return false
}
