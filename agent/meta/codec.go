package meta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// The encoding of a Metadata record (all integers big-endian, fixed
// width, so a record has exactly one encoding and Decode(b) re-encodes to
// b):
//
//	magic    "GXMD"
//	version  1 byte: codecVersion (1), or codecFlags (2) when a section
//	         has flags (Emulated)
//	name     str
//	incarn.  u64 (never 0)
//	version  u64
//	unix     str
//	tcp      str
//	nics     u8 count (<= MaxAddrs), each: device str, port u16, gid str
//	sections u32 count (<= MaxSections), each: name str, len u64,
//	         location str, [flags u8: version 2 only], key u16
//	         length (<= MaxKey) + bytes
//
// where str is a u8 length (so <= MaxName bytes) and the bytes, valid
// UTF-8 with no control characters. Names are never empty; sections are
// sorted by name, names unique; nothing may follow the last section; the
// whole record is at most MaxRecord bytes. A record with no flags set is
// encoded as version 1 (readers of version 1 only read it, and a record
// published before flags existed decodes unchanged); version 2 is used
// only when a section has a flag, so a version 2 record with no flag set
// is refused (it has a version 1 encoding), as are unknown flag bits.
const (
	codecMagic   = "GXMD"
	codecVersion = 1
	codecFlags   = 2

	flagEmulated = 1 << 0 // Section.Emulated
	knownFlags   = flagEmulated
)

// Smallest encodings, to refuse counts the remaining bytes cannot hold
// before allocating for them.
const (
	minNIC     = 1 + 2 + 1         // device, port, gid
	minSection = 1 + 8 + 1 + 2 + 1 // name (>= 1 byte), len, location, key length
)

// Encode returns the record's encoding, or an error matching ErrMalformed
// if the record breaks a rule Decode checks (so anything Encode accepts,
// Decode accepts and returns unchanged, up to nil versus empty slices:
// Decode returns nil for no NICs, no sections and empty keys).
func (m *Metadata) Encode() ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, m.Size())
	b = append(b, codecMagic...)
	flags := m.hasFlags()
	if flags {
		b = append(b, codecFlags)
	} else {
		b = append(b, codecVersion)
	}
	b = appendStr(b, m.Name)
	b = binary.BigEndian.AppendUint64(b, m.Incarnation)
	b = binary.BigEndian.AppendUint64(b, m.Version)
	b = appendStr(b, m.Unix)
	b = appendStr(b, m.TCP)
	b = append(b, uint8(len(m.NICs)))
	for _, n := range m.NICs {
		b = appendStr(b, n.Device)
		b = binary.BigEndian.AppendUint16(b, uint16(n.Port))
		b = appendStr(b, n.GID)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Sections)))
	for _, s := range m.Sections {
		b = appendStr(b, s.Name)
		b = binary.BigEndian.AppendUint64(b, s.Len)
		b = appendStr(b, s.Location)
		if flags {
			b = append(b, s.flags())
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(s.Key)))
		b = append(b, s.Key...)
	}
	return b, nil
}

// Size is the length of the record's encoding, in bytes (at most
// MaxRecord for a record Encode takes).
func (m *Metadata) Size() int {
	n := len(codecMagic) + 1 + 1 + len(m.Name) + 8 + 8 + 1 + len(m.Unix) + 1 + len(m.TCP) + 1
	for _, c := range m.NICs {
		n += 1 + len(c.Device) + 2 + 1 + len(c.GID)
	}
	n += 4
	for _, s := range m.Sections {
		n += 1 + len(s.Name) + 8 + 1 + len(s.Location) + 2 + len(s.Key)
	}
	if m.hasFlags() {
		n += len(m.Sections) // a flags byte per section
	}
	return n
}

// hasFlags reports whether a section has a flag, so that the record is
// encoded as version 2.
func (m *Metadata) hasFlags() bool {
	for _, s := range m.Sections {
		if s.flags() != 0 {
			return true
		}
	}
	return false
}

func (s *Section) flags() uint8 {
	if s.Emulated {
		return flagEmulated
	}
	return 0
}

// check applies Decode's rules to a record about to be encoded.
func (m *Metadata) check() error {
	if err := checkName("agent name", m.Name); err != nil {
		return err
	}
	if m.Incarnation == 0 {
		return malformed("agent %q: incarnation 0", m.Name)
	}
	for _, f := range []struct{ what, s string }{{"unix address", m.Unix}, {"tcp address", m.TCP}} {
		if err := checkStr(f.what, f.s); err != nil {
			return err
		}
	}
	if len(m.NICs) > MaxAddrs {
		return malformed("%d NICs, at most %d", len(m.NICs), MaxAddrs)
	}
	for _, n := range m.NICs {
		if err := checkStr("NIC device", n.Device); err != nil {
			return err
		}
		if err := checkStr("NIC GID", n.GID); err != nil {
			return err
		}
		if n.Port < 0 || n.Port > 0xffff {
			return malformed("NIC %q: port %d out of range", n.Device, n.Port)
		}
	}
	if len(m.Sections) > MaxSections {
		return malformed("%d sections, at most %d", len(m.Sections), MaxSections)
	}
	for i, s := range m.Sections {
		if err := checkSection(s); err != nil {
			return err
		}
		if i > 0 && m.Sections[i-1].Name >= s.Name {
			return malformed("sections not sorted or not unique: %q then %q", m.Sections[i-1].Name, s.Name)
		}
	}
	if n := m.Size(); n > MaxRecord {
		return malformed("record of %d bytes, at most %d", n, MaxRecord)
	}
	return nil
}

func checkSection(s Section) error {
	if err := checkName("section name", s.Name); err != nil {
		return err
	}
	if err := checkStr("section location", s.Location); err != nil {
		return err
	}
	if len(s.Key) > MaxKey {
		return malformed("section %q: key of %d bytes, at most %d", s.Name, len(s.Key), MaxKey)
	}
	return nil
}

// CheckName says why s cannot be an agent's name (Decode accepts no
// record of that name), or nil if it can be: it must be non-empty, at most
// MaxName bytes of UTF-8 without control characters. Errors match
// ErrMalformed and do not quote a name over MaxName bytes.
func CheckName(s string) error { return checkName("agent name", s) }

// checkName: a non-empty checkStr.
func checkName(what, s string) error {
	if s == "" {
		return malformed("empty %s", what)
	}
	return checkStr(what, s)
}

// checkStr: at most MaxName bytes of UTF-8 without control characters.
func checkStr(what, s string) error {
	if len(s) > MaxName {
		return malformed("%s of %d bytes, at most %d", what, len(s), MaxName)
	}
	if !utf8.ValidString(s) {
		return malformed("%s %q is not UTF-8", what, s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return malformed("%s %q has a control character", what, s)
		}
	}
	return nil
}

func appendStr(b []byte, s string) []byte {
	b = append(b, uint8(len(s)))
	return append(b, s...)
}

// Decode parses an encoded record, checking every limit and rule (the
// bytes may come from a hostile peer or a shared store): errors match
// ErrMalformed. The result shares no memory with b.
func Decode(b []byte) (Metadata, error) {
	var m Metadata
	if len(b) > MaxRecord {
		return m, malformed("record of %d bytes, at most %d", len(b), MaxRecord)
	}
	if len(b) < len(codecMagic)+1 || !bytes.Equal(b[:len(codecMagic)], []byte(codecMagic)) {
		return m, malformed("not a metadata record (bad magic)")
	}
	v := b[len(codecMagic)]
	if v != codecVersion && v != codecFlags {
		return m, malformed("encoding version %d, this build reads %d and %d", v, codecVersion, codecFlags)
	}
	minSec := minSection
	if v == codecFlags {
		minSec++
	}
	d := decoder{b: b[len(codecMagic)+1:]}
	m.Name = d.str()
	m.Incarnation = d.u64()
	m.Version = d.u64()
	m.Unix = d.str()
	m.TCP = d.str()
	if n := int(d.u8()); n > 0 && d.err == nil {
		if n > MaxAddrs || n*minNIC > len(d.b) {
			return Metadata{}, malformed("%d NICs in %d bytes (at most %d)", n, len(d.b), MaxAddrs)
		}
		m.NICs = make([]NIC, n)
		for i := range m.NICs {
			m.NICs[i] = NIC{Device: d.str(), Port: int(d.u16()), GID: d.str()}
		}
	}
	if n := int(d.u32()); n > 0 && d.err == nil {
		if n > MaxSections || n*minSec > len(d.b) {
			return Metadata{}, malformed("%d sections in %d bytes (at most %d)", n, len(d.b), MaxSections)
		}
		m.Sections = make([]Section, n)
		for i := range m.Sections {
			s := &m.Sections[i]
			s.Name = d.str()
			s.Len = d.u64()
			s.Location = d.str()
			if v == codecFlags {
				f := d.u8()
				if f&^knownFlags != 0 {
					return Metadata{}, malformed("section %q: unknown flags %#x", s.Name, f)
				}
				s.Emulated = f&flagEmulated != 0
			}
			s.Key = d.bytes(int(d.u16()))
		}
	}
	if d.err != nil {
		return Metadata{}, d.err
	}
	if len(d.b) != 0 {
		return Metadata{}, malformed("%d bytes after the last section", len(d.b))
	}
	if err := m.check(); err != nil {
		return Metadata{}, err
	}
	if v == codecFlags && !m.hasFlags() {
		return Metadata{}, malformed("encoding version %d with no section flag (the record encodes as version %d)", v, codecVersion)
	}
	return m, nil
}

// decoder reads fixed-width fields; the first short read sets err and
// every later read returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = malformed("truncated: %d bytes wanted, %d left", n, len(d.b))
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8() uint8 {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) str() string {
	return string(d.take(int(d.u8())))
}

// bytes returns a copy of the next n bytes, nil for n == 0.
func (d *decoder) bytes(n int) []byte {
	p := d.take(n)
	if len(p) == 0 {
		return nil
	}
	return bytes.Clone(p)
}

// malformedError is an error matching ErrMalformed with a detail.
type malformedError struct{ msg string }

func (e *malformedError) Error() string        { return ErrMalformed.Error() + ": " + e.msg }
func (e *malformedError) Is(target error) bool { return target == ErrMalformed }

func malformed(format string, args ...any) error {
	return &malformedError{msg: fmt.Sprintf(format, args...)}
}
