package etcdmeta

import (
	"bytes"
	"testing"

	"github.com/rs/zerolog"
)

// FuzzStoreDecode: any key and value found under the prefix (written by
// anyone with access to etcd) either decode to the record of the agent
// the key names, re-encoding to the value and sharing no memory with it,
// or are counted as malformed; nothing panics.
func FuzzStoreDecode(f *testing.F) {
	rec := record("a", 1, 2)
	val, err := rec.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add("a", val)
	f.Add("b", val)   // another agent's record under the key
	f.Add("a/x", val) // a key under the name
	f.Add("", val)
	f.Add("a", val[:len(val)-1])
	f.Add("a", []byte("GXMD"))
	f.Fuzz(func(t *testing.T, name string, value []byte) {
		s := &Store{cfg: Config{Prefix: DefaultPrefix}, log: zerolog.Nop()}
		before := s.stats.malformed.Load()
		in := bytes.Clone(value)
		m, ok := s.decode(DefaultPrefix+name, in)
		if !ok {
			if s.stats.malformed.Load() != before+1 {
				t.Fatalf("a value that did not decode was not counted as malformed")
			}
			return
		}
		if s.stats.malformed.Load() != before {
			t.Fatalf("a record that decoded was counted as malformed")
		}
		if m.Name != name {
			t.Fatalf("record of %q accepted under the key of %q", m.Name, name)
		}
		re, err := m.Encode()
		if err != nil || !bytes.Equal(re, value) {
			t.Fatalf("decoded record re-encodes to %x (%v), not %x", re, err, value)
		}
		for i := range in {
			in[i] ^= 0xff
		}
		if re2, err := m.Encode(); err != nil || !bytes.Equal(re2, value) {
			t.Fatalf("the record shares memory with the value: %x (%v) after it changed", re2, err)
		}
	})
}
