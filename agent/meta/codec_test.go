package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func sample() Metadata {
	return Metadata{
		Name:        "prefill-0",
		Incarnation: 0x1122334455667788,
		Version:     3,
		Unix:        "/run/gxfer/prefill-0.sock",
		TCP:         "10.0.0.1:7000",
		NICs: []NIC{
			{Device: "rxe0", Port: 1, GID: "fe80::1"},
			{Device: "mlx5_1", Port: 2, GID: "::ffff:10.0.0.1"},
		},
		Sections: []Section{
			{Name: "kv", Len: 1 << 30, Location: "gaudi0", Key: bytes.Repeat([]byte{0xab}, 112)},
			{Name: "weights", Len: 4096, Location: "host", Key: []byte{1, 2, 3}},
		},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	many := Metadata{Name: "many", Incarnation: 1}
	for i := 0; i < MaxSections; i++ {
		many.Sections = append(many.Sections, Section{Name: fmt.Sprintf("blk-%d", i), Len: uint64(i), Location: "host", Key: []byte{byte(i)}})
	}
	many.Sections[0].Key = nil
	sortSections(many.Sections)
	maxNICs := Metadata{Name: "n", Incarnation: ^uint64(0), Version: ^uint64(0)}
	for i := 0; i < MaxAddrs; i++ {
		maxNICs.NICs = append(maxNICs.NICs, NIC{Device: strings.Repeat("d", MaxName), Port: 0xffff, GID: strings.Repeat("g", MaxName)})
	}
	tests := []struct {
		name string
		m    Metadata
	}{
		{"sample", sample()},
		{"minimal", Metadata{Name: "a", Incarnation: 1}},
		{"unicode names", Metadata{Name: "décodeur-ü", Incarnation: 7, Sections: []Section{{Name: "blöck", Location: "host"}}}},
		{"max sections", many},
		{"max NICs and long strings", maxNICs},
		{"max key", Metadata{Name: "k", Incarnation: 2, Sections: []Section{{Name: "s", Key: bytes.Repeat([]byte{7}, MaxKey)}}}},
		{"emulated section", emulatedSample()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.m.Encode()
			require.NoError(t, err)
			require.Len(t, b, tt.m.Size())
			got, err := Decode(b)
			require.NoError(t, err)
			require.Equal(t, tt.m, got)
			b2, err := got.Encode()
			require.NoError(t, err)
			require.Equal(t, b, b2, "one encoding per record")
		})
	}
}

func sortSections(s []Section) {
	slices.SortFunc(s, func(a, b Section) int { return strings.Compare(a.Name, b.Name) })
}

func TestEncodeRefuses(t *testing.T) {
	long := strings.Repeat("x", MaxName+1)
	tests := []struct {
		name string
		edit func(m *Metadata)
		want string
	}{
		{"empty name", func(m *Metadata) { m.Name = "" }, "empty agent name"},
		{"long name", func(m *Metadata) { m.Name = long }, "agent name of 256 bytes"},
		{"name not UTF-8", func(m *Metadata) { m.Name = "a\xff" }, "not UTF-8"},
		{"name with NUL", func(m *Metadata) { m.Name = "a\x00b" }, "control character"},
		{"name with newline", func(m *Metadata) { m.Name = "a\nb" }, "control character"},
		{"name with C1 control", func(m *Metadata) { m.Name = "a\u0085b" }, "control character"},
		{"incarnation 0", func(m *Metadata) { m.Incarnation = 0 }, "incarnation 0"},
		{"long unix", func(m *Metadata) { m.Unix = long }, "unix address"},
		{"long tcp", func(m *Metadata) { m.TCP = long }, "tcp address"},
		{"too many NICs", func(m *Metadata) { m.NICs = make([]NIC, MaxAddrs+1) }, "NICs, at most"},
		{"negative port", func(m *Metadata) { m.NICs[0].Port = -1 }, "port -1"},
		{"port too large", func(m *Metadata) { m.NICs[0].Port = 1 << 16 }, "port 65536"},
		{"long device", func(m *Metadata) { m.NICs[0].Device = long }, "NIC device"},
		{"long gid", func(m *Metadata) { m.NICs[0].GID = long }, "NIC GID"},
		{"too many sections", func(m *Metadata) { m.Sections = make([]Section, MaxSections+1) }, "sections, at most"},
		{"empty section name", func(m *Metadata) { m.Sections[0].Name = "" }, "empty section name"},
		{"long section name", func(m *Metadata) { m.Sections[0].Name = long }, "section name of"},
		{"long location", func(m *Metadata) { m.Sections[0].Location = long }, "section location"},
		{"key too large", func(m *Metadata) { m.Sections[0].Key = make([]byte, MaxKey+1) }, "key of 1025 bytes"},
		{"unsorted sections", func(m *Metadata) { m.Sections[0], m.Sections[1] = m.Sections[1], m.Sections[0] }, "not sorted"},
		{"duplicate sections", func(m *Metadata) { m.Sections[1].Name = m.Sections[0].Name }, "not unique"},
		{"record too large", func(m *Metadata) {
			m.Sections = nil
			for i := 0; i < MaxSections; i++ {
				m.Sections = append(m.Sections, Section{Name: sectionName(i), Key: make([]byte, 200)})
			}
		}, "record of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := sample()
			tt.edit(&m)
			_, err := m.Encode()
			require.ErrorIs(t, err, ErrMalformed)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// sectionName returns distinct names sorted as i grows.
func sectionName(i int) string {
	return "s" + string([]byte{byte('a' + i>>12&15), byte('a' + i>>8&15), byte('a' + i>>4&15), byte('a' + i&15), byte('a' + i>>16&15)})
}

func TestDecodeRefuses(t *testing.T) {
	good, err := func() ([]byte, error) { m := sample(); return m.Encode() }()
	require.NoError(t, err)
	// Offsets in good: magic 0..3, version 4, name length 5.
	nameEnd := 6 + len("prefill-0")
	incarn := nameEnd
	nicCount := nameEnd + 16 + 1 + len(sample().Unix) + 1 + len(sample().TCP)
	secCount := len(good) - (4 + 1 + 2 + 8 + 1 + 6 + 2 + 112) - (1 + 7 + 8 + 1 + 4 + 2 + 3)
	require.Equal(t, uint32(2), binary.BigEndian.Uint32(good[secCount:]))
	require.Equal(t, byte(2), good[nicCount])
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"nil", nil, "bad magic"},
		{"short", []byte("GXM"), "bad magic"},
		{"bad magic", edit(func(b []byte) []byte { b[0] = 'X'; return b }), "bad magic"},
		{"other version", edit(func(b []byte) []byte { b[4] = 3; return b }), "encoding version 3"},
		{"header only", []byte("GXMD\x01"), "truncated"},
		{"truncated", good[:len(good)-1], "truncated"},
		{"each truncation", nil, ""}, // below
		{"trailing byte", append(bytes.Clone(good), 0), "1 bytes after"},
		{"incarnation 0", edit(func(b []byte) []byte { clear(b[incarn : incarn+8]); return b }), "incarnation 0"},
		{"name length 0", append([]byte("GXMD\x01\x00"), make([]byte, 8+8+1+1+1+4)...), "empty agent name"},
		{"too many NICs", edit(func(b []byte) []byte { b[nicCount] = MaxAddrs + 1; return b }), "NICs in"},
		{"NIC count beyond bytes", edit(func(b []byte) []byte { b[nicCount] = 60; return b }), "NICs in"},
		{"too many sections", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[secCount:], MaxSections+1); return b }), "sections in"},
		{"section count beyond bytes", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[secCount:], 1<<16); return b }), "sections in"},
		{"section count 1 leaves bytes", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[secCount:], 1); return b }), "bytes after"},
		{"unsorted", edit(func(b []byte) []byte { b[secCount+5] = 'z'; return b }), "not sorted"},
		{"key too long", edit(func(b []byte) []byte {
			b = b[:secCount]
			b = binary.BigEndian.AppendUint32(b, 1)
			b = append(b, 1, 's')
			b = binary.BigEndian.AppendUint64(b, 1)
			b = append(b, 0)
			b = binary.BigEndian.AppendUint16(b, MaxKey+1)
			return append(b, make([]byte, MaxKey+1)...)
		}), "key of 1025 bytes"},
		{"too large", append(bytes.Clone(good), make([]byte, MaxRecord)...), "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "each truncation" {
				for n := 0; n < len(good); n++ {
					_, err := Decode(good[:n])
					require.ErrorIs(t, err, ErrMalformed, "%d of %d bytes", n, len(good))
				}
				return
			}
			m, err := Decode(tt.b)
			require.ErrorIs(t, err, ErrMalformed)
			require.Contains(t, err.Error(), tt.want)
			require.Equal(t, Metadata{}, m)
		})
	}
}

func TestDecodeCopies(t *testing.T) {
	m := sample()
	b, err := m.Encode()
	require.NoError(t, err)
	got, err := Decode(b)
	require.NoError(t, err)
	clear(b)
	require.Equal(t, sample(), got)
}

func TestMalformedError(t *testing.T) {
	err := malformed("x %d", 1)
	require.True(t, errors.Is(err, ErrMalformed))
	require.False(t, errors.Is(err, ErrNotFound))
	require.Equal(t, "meta: malformed record: x 1", err.Error())
}

func FuzzDecode(f *testing.F) {
	for _, m := range []Metadata{sample(), emulatedSample(), {Name: "a", Incarnation: 1}} {
		b, err := m.Encode()
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte("GXMD\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		b2, err := m.Encode()
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b, b2)
		}
		m2, err := Decode(b2)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip differs: %+v vs %+v", m, m2)
		}
	})
}

func TestCheckName(t *testing.T) {
	tests := []struct {
		name, s string
		want    string // "" if valid
	}{
		{"plain", "prefill-0", ""},
		{"unicode", "décodeur-ü", ""},
		{"with slash", "pool/a", ""},
		{"max length", strings.Repeat("n", MaxName), ""},
		{"empty", "", "empty agent name"},
		{"too long, not quoted", strings.Repeat("n", 1<<20), "agent name of 1048576 bytes"},
		{"not UTF-8", "a\xff", "not UTF-8"},
		{"control character", "a\x1bb", "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckName(tt.s)
			if tt.want == "" {
				require.NoError(t, err)
				m := Metadata{Name: tt.s, Incarnation: 1}
				_, err := m.Encode()
				require.NoError(t, err, "a valid name encodes")
				return
			}
			require.ErrorIs(t, err, ErrMalformed)
			require.Contains(t, err.Error(), tt.want)
			require.Less(t, len(err.Error()), 2*MaxName)
		})
	}
}

// emulatedSample is sample with its kv section on an emulated device.
func emulatedSample() Metadata {
	m := sample()
	m.Sections[0].Emulated = true
	return m
}

// TestSectionEmulatedEncoding: a record with an emulated section says so
// to its readers (version 2, a flags byte per section); one without is
// encoded as before the flag existed (version 1, byte for byte), so
// records of older agents decode, and older readers read it; a version 2
// record with no flag (it has a version 1 encoding) or an unknown flag is
// refused.
func TestSectionEmulatedEncoding(t *testing.T) {
	// The version 1 encoding of sample(), written out as older agents did.
	v1 := []byte("GXMD\x01")
	m := sample()
	v1 = appendStr(v1, m.Name)
	v1 = binary.BigEndian.AppendUint64(v1, m.Incarnation)
	v1 = binary.BigEndian.AppendUint64(v1, m.Version)
	v1 = appendStr(appendStr(v1, m.Unix), m.TCP)
	v1 = append(v1, uint8(len(m.NICs)))
	for _, n := range m.NICs {
		v1 = appendStr(binary.BigEndian.AppendUint16(appendStr(v1, n.Device), uint16(n.Port)), n.GID)
	}
	v1 = binary.BigEndian.AppendUint32(v1, uint32(len(m.Sections)))
	for _, s := range m.Sections {
		v1 = appendStr(binary.BigEndian.AppendUint64(appendStr(v1, s.Name), s.Len), s.Location)
		v1 = append(binary.BigEndian.AppendUint16(v1, uint16(len(s.Key))), s.Key...)
	}
	got, err := Decode(v1)
	require.NoError(t, err, "a record without the flag decodes")
	require.Equal(t, sample(), got)
	require.False(t, got.Sections[0].Emulated)
	b, err := m.Encode()
	require.NoError(t, err)
	require.Equal(t, v1, b, "no flag: the version 1 encoding")

	e := emulatedSample()
	b, err = e.Encode()
	require.NoError(t, err)
	require.Equal(t, byte(2), b[4])
	require.Len(t, b, len(v1)+len(e.Sections))
	got, err = Decode(b)
	require.NoError(t, err)
	require.True(t, got.Sections[0].Emulated)
	require.False(t, got.Sections[1].Emulated)

	// The kv section's flags byte: after its location ("gaudi0").
	flagAt := bytes.Index(b, []byte("\x06gaudi0")) + 7
	for _, tc := range []struct {
		name  string
		flags byte
		want  string
	}{
		{"no flag in version 2", 0, "with no section flag"},
		{"unknown flag", 0x81, "unknown flags 0x81"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := bytes.Clone(b)
			bad[flagAt] = tc.flags
			m, err := Decode(bad)
			require.ErrorIs(t, err, ErrMalformed)
			require.Contains(t, err.Error(), tc.want)
			require.Equal(t, Metadata{}, m)
		})
	}
}
