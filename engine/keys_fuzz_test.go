package engine

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gxfer/gxfer/wire"
)

// FuzzParseRemoteKey feeds arbitrary bytes (a peer's key) to
// ParseRemoteKey, and narrows what it accepts with Slice and View at
// arbitrary ranges. Nothing may panic; an accepted key re-encodes to its
// bytes; a narrowed key stays inside the key it came from (its view in
// the view, its grant in the grant), and a bad range encodes to nothing.
func FuzzParseRemoteKey(f *testing.F) {
	e := newEngine(f, Config{Devices: DevicesNone})
	b, err := e.Alloc(64<<10, Host)
	if err != nil {
		f.Fatal(err)
	}
	root, err := b.Export()
	if err != nil {
		f.Fatal(err)
	}
	for _, k := range []RemoteKey{root, root.Slice(8192, 4096), root.View(100, 1000), root.Slice(4096, 8192).View(10, 20)} {
		f.Add(k.Bytes(), int64(0), int64(k.Len()))
		f.Add(k.Bytes(), int64(1), int64(k.Len()-1))
		f.Add(k.Bytes(), int64(-1), int64(10))
		f.Add(k.Bytes(), int64(k.Len()), int64(1))
	}
	f.Add([]byte{}, int64(0), int64(0))
	f.Add(make([]byte, wire.KeySize), int64(0), int64(1))

	f.Fuzz(func(t *testing.T, data []byte, off, n int64) {
		k, err := ParseRemoteKey(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("refusal is not ErrInvalid: %v", err)
			}
			return
		}
		if k.Err() != nil || k.Len() <= 0 {
			t.Fatalf("parsed key: Err %v, Len %d", k.Err(), k.Len())
		}
		if !bytes.Equal(k.Bytes(), data) {
			t.Fatalf("round trip:\n in  %x\n out %x", data, k.Bytes())
		}
		for _, narrow := range []struct {
			name string
			k    RemoteKey
		}{{"Slice", k.Slice(int(off), int(n))}, {"View", k.View(int(off), int(n))}} {
			s := narrow.k
			if s.Err() != nil {
				if !errors.Is(s.Err(), ErrInvalid) {
					t.Fatalf("%s(%d, %d): error is not ErrInvalid: %v", narrow.name, off, n, s.Err())
				}
				if s.Bytes() != nil {
					t.Fatalf("%s(%d, %d) failed but encodes to %x", narrow.name, off, n, s.Bytes())
				}
				continue
			}
			if off < 0 || n <= 0 || int64(s.Len()) != n || uint64(off)+uint64(n) > k.k.Len {
				t.Fatalf("%s(%d, %d) of a %d-byte view accepted: view of %d", narrow.name, off, n, k.Len(), s.Len())
			}
			if s.k.Offset != k.k.Offset+uint64(off) {
				t.Fatalf("%s(%d, %d): view at %d, want %d", narrow.name, off, n, s.k.Offset, k.k.Offset+uint64(off))
			}
			if s.k.GrantOffset < k.k.GrantOffset || s.k.GrantOffset-k.k.GrantOffset > k.k.GrantLen ||
				s.k.GrantLen > k.k.GrantLen-(s.k.GrantOffset-k.k.GrantOffset) {
				t.Fatalf("%s(%d, %d) widened the grant [%d, +%d) to [%d, +%d)", narrow.name, off, n,
					k.k.GrantOffset, k.k.GrantLen, s.k.GrantOffset, s.k.GrantLen)
			}
			if narrow.name == "View" && (s.k.GrantOffset != k.k.GrantOffset || s.k.GrantLen != k.k.GrantLen || s.k.MAC != k.k.MAC) {
				t.Fatalf("View(%d, %d) changed the grant", off, n)
			}
			back, err := ParseRemoteKey(s.Bytes())
			if err != nil || back.k != s.k {
				t.Fatalf("%s(%d, %d) does not round-trip: %v", narrow.name, off, n, err)
			}
		}
	})
}

// FuzzLookupKey presents the owner (lookupKey) with keys a peer edited:
// the view (not signed) and the request at arbitrary values, and one bit
// of the signed part flipped. The owner may answer StatusOK only for the
// unedited signed part, and only with a slice of the exported buffer
// inside the key's grant, of the requested length at the requested place.
func FuzzLookupKey(f *testing.F) {
	e := newEngine(f, Config{Devices: DevicesNone})
	const size = 64 << 10
	b, err := e.Alloc(size, Host)
	if err != nil {
		f.Fatal(err)
	}
	root, err := b.Export()
	if err != nil {
		f.Fatal(err)
	}
	narrow := root.Slice(8192, 4096)
	keys := []wire.RemoteKey{root.k, narrow.k}
	f.Add(uint8(0), uint64(0), uint64(size), uint64(0), uint64(size), -1)
	f.Add(uint8(1), uint64(8192), uint64(4096), uint64(0), uint64(4096), -1)
	f.Add(uint8(1), uint64(0), uint64(size), uint64(0), uint64(size), -1)
	f.Add(uint8(1), uint64(8192), uint64(4096), uint64(4095), uint64(2), -1)
	f.Add(uint8(0), uint64(1), ^uint64(0), ^uint64(0), uint64(2), -1)
	f.Add(uint8(0), uint64(0), uint64(size), uint64(0), uint64(size), 70*8)
	f.Add(uint8(1), uint64(8192), uint64(4096), uint64(0), uint64(4096), 88*8)

	f.Fuzz(func(t *testing.T, which uint8, viewOff, viewLen, off, n uint64, flip int) {
		k := keys[int(which)%len(keys)]
		orig := k
		k.Offset, k.Len = viewOff, viewLen
		flipped := false
		if flip >= 0 && flip < 96*8 { // a bit of the signed bytes
			enc, err := k.MarshalBinary()
			if err != nil {
				return // not encodable: no peer could send it
			}
			enc[flip/8] ^= 1 << (flip % 8)
			if err := k.UnmarshalBinary(enc); err != nil {
				return
			}
			flipped = true
		}
		// Without a flip the view is not validated as decoding would: a
		// view outside the grant must be refused by lookupKey itself.
		s, st, msg := e.lookupKey(&k, off, n, wire.KeyWrite)
		if st != wire.StatusOK {
			if msg == "" {
				t.Fatalf("refusal %v without a reason", st)
			}
			return
		}
		if flipped {
			signed, o := k, orig
			signed.Offset, signed.Len, o.Offset, o.Len = 0, 0, 0, 0
			if signed != o {
				t.Fatalf("a key with bit %d of its signed part flipped was accepted", flip)
			}
		}
		if s.buf != b || s.err != nil {
			t.Fatalf("accepted: slice of buffer %v (err %v)", s.buf, s.err)
		}
		if s.n != n || s.off != viewOff+off {
			t.Fatalf("accepted view [%d, +%d) request [%d, +%d): slice [%d, +%d)", viewOff, viewLen, off, n, s.off, s.n)
		}
		if s.off < orig.GrantOffset || s.off+s.n > orig.GrantOffset+orig.GrantLen || s.off+s.n > size {
			t.Fatalf("slice [%d, +%d) outside the grant [%d, +%d)", s.off, s.n, orig.GrantOffset, orig.GrantLen)
		}
	})
}
