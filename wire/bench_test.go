package wire

import "testing"

// BenchmarkPutEncodeDecode encodes a Put (with a local key) into a reused
// buffer and decodes it back into a reused message.
func BenchmarkPutEncodeDecode(b *testing.B) {
	m := &Put{Request{RequestID: 1, Key: testGaudiKey(), Length: 4096, Local: Local{Kind: LocalKey, Key: testKey()}}}
	buf := make([]byte, 0, 512)
	var out Put
	b.ReportAllocs()
	for b.Loop() {
		fr, err := AppendFrame(buf[:0], m)
		if err != nil {
			b.Fatal(err)
		}
		h, p, err := DecodeFrame(fr, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := out.DecodePayload(h, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify is the owner's per-request key check.
func BenchmarkVerify(b *testing.B) {
	k := testKey()
	b.Run("func", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := Verify(&k, testSecret); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("signer", func(b *testing.B) {
		s, _ := NewSigner(testSecret)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Verify(&k); err != nil {
				b.Fatal(err)
			}
		}
	})
}
