package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
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

// FuzzStreamRecv feeds arbitrary bytes to Conn.Recv over a
// StreamTransport (the TCP framing, no routing) and compares what it
// returns with a plain reading of the stream: each length-prefixed frame
// in order, a frame that does not decode refused with ErrMalformed or
// ErrVersion (the stream stays in step), and a zero, oversized or
// truncated frame ending the stream. Nothing may panic.
func FuzzStreamRecv(f *testing.F) {
	var seed []byte
	for _, m := range sampleMessages() {
		fr, err := AppendFrame(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		if len(fr) > 1024 {
			continue
		}
		seed = append(binary.LittleEndian.AppendUint32(seed, uint32(len(fr))), fr...)
	}
	f.Add(seed)
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'g', 'x'})
	f.Add(binary.LittleEndian.AppendUint32(nil, HeaderSize))
	const maxFrame = 1024
	f.Fuzz(func(t *testing.T, stream []byte) {
		a, b := net.Pipe()
		c := NewConn(NewStreamTransport(b), ConnConfig{MaxFrame: maxFrame})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = a.Write(stream)
			_ = a.Close()
		}()
		defer func() {
			_ = c.Close()
			<-done
		}()
		rest := stream
		for i := 0; ; i++ {
			fr, err := c.Recv(context.Background())
			if len(rest) < 4 {
				if err == nil {
					t.Fatalf("frame %d: Recv returned %v past the end of the stream", i, fr.Header)
				}
				return
			}
			l := binary.LittleEndian.Uint32(rest)
			if l == 0 || l > maxFrame || uint64(len(rest)-4) < uint64(l) {
				if err == nil {
					t.Fatalf("frame %d: Recv accepted a %d-byte frame with %d bytes left", i, l, len(rest)-4)
				}
				if l > maxFrame && !errors.Is(err, ErrTooLarge) {
					t.Fatalf("frame %d: %d-byte frame: %v, want ErrTooLarge", i, l, err)
				}
				return
			}
			want := rest[4 : 4+l]
			rest = rest[4+l:]
			wh, wp, werr := DecodeFrame(want, maxFrame)
			switch {
			case werr != nil && err == nil:
				t.Fatalf("frame %d: Recv accepted %x (%v)", i, want, werr)
			case werr != nil:
				if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
					t.Fatalf("frame %d: %v, want ErrMalformed or ErrVersion", i, err)
				}
			case werr == nil && wh.NumFDs != 0:
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("frame %d announcing %d fds: %v, want ErrMalformed", i, wh.NumFDs, err)
				}
			case err != nil:
				t.Fatalf("frame %d: Recv refused %x: %v", i, want, err)
			case fr.Header != wh || !bytes.Equal(fr.Payload, wp) || len(fr.FDs) != 0:
				t.Fatalf("frame %d: got %v %x, want %v %x", i, fr.Header, fr.Payload, wh, wp)
			}
		}
	})
}
