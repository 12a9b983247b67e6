package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/meta"
)

func TestProtoRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		want message
	}{
		{"hello", encodeHello("prefill-0", 7, 9, 3, true),
			message{typ: msgHello, name: "prefill-0", incarnation: 7, expect: 9, version: 3, wantMeta: true}},
		{"hello without metadata", encodeHello("d", 1, 0, 0, false),
			message{typ: msgHello, name: "d", incarnation: 1}},
		{"invalidate", encodeInvalidate(42), message{typ: msgInvalidate, version: 42}},
		{"notify", encodeNotify([]byte("kv block 7")), message{typ: msgNotify, data: []byte("kv block 7")}},
		{"empty notify", encodeNotify(nil), message{typ: msgNotify, data: []byte{}}},
		{"refuse", encodeRefuse("go away"), message{typ: msgRefuse, data: []byte("go away")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.LessOrEqual(t, len(tt.b), maxMessage)
			m, err := decode(tt.b)
			require.NoError(t, err)
			require.Equal(t, tt.want, m)
		})
	}
}

func TestProtoMetaChunks(t *testing.T) {
	for _, n := range []int{1, chunkData - 1, chunkData, chunkData + 1, 3*chunkData + 17} {
		rec := bytes.Repeat([]byte{0xa5}, n)
		rec[n-1] = 0x5a
		var asm assembler
		chunks := encodeMeta(rec)
		require.Len(t, chunks, (n+chunkData-1)/chunkData)
		for i, c := range chunks {
			require.LessOrEqual(t, len(c), maxMessage)
			m, err := decode(c)
			require.NoError(t, err)
			got, done, err := asm.add(m)
			require.NoError(t, err)
			require.Equal(t, i == len(chunks)-1, done)
			if done {
				require.Equal(t, rec, got)
			}
		}
	}
}

func TestProtoMalformed(t *testing.T) {
	hello := encodeHello("a", 1, 0, 0, false)
	chunk := func(total, off uint32, data []byte) []byte {
		b := header(msgMetaChunk, 8+len(data))
		b = binary.LittleEndian.AppendUint32(b, total)
		b = binary.LittleEndian.AppendUint32(b, off)
		return append(b, data...)
	}
	mod := func(b []byte, i int, v byte) []byte {
		c := bytes.Clone(b)
		c[i] = v
		return c
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short header", []byte{'g', 'A', 1}},
		{"bad magic", mod(hello, 0, 'x')},
		{"bad version", mod(hello, 2, 9)},
		{"unknown type", mod(hello, 3, 77)},
		{"type zero", mod(hello, 3, 0)},
		{"too long", append(encodeNotify(nil), make([]byte, maxMessage)...)},
		{"hello truncated", hello[:len(hello)-1]},
		{"hello trailing", append(bytes.Clone(hello), 0)},
		{"hello no name", encodeHello("", 1, 0, 0, false)},
		{"hello incarnation 0", encodeHello("a", 0, 0, 0, false)},
		{"hello name with a control character", encodeHello("a\x1b[2Jb", 1, 0, 0, false)},
		{"hello name not UTF-8", encodeHello("a\xffb", 1, 0, 0, false)},
		{"hello flags", mod(hello, headerLen, 0x80)},
		{"hello header only", header(msgHello, 0)},
		{"chunk short", header(msgMetaChunk, 0)},
		{"chunk total 0", chunk(0, 0, []byte{1})},
		{"chunk total too big", chunk(meta.MaxRecord+1, 0, []byte{1})},
		{"chunk past total", chunk(4, 2, []byte{1, 2, 3})},
		{"chunk offset overflow", chunk(10, 0xffffffff, []byte{1})},
		{"chunk empty", chunk(10, 0, nil)},
		{"invalidate short", header(msgInvalidate, 0)},
		{"invalidate long", append(encodeInvalidate(1), 0)},
		{"refuse too long", append(header(msgRefuse, 0), make([]byte, 1025)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decode(tt.b)
			require.ErrorIs(t, err, ErrProtocol)
		})
	}
}

func TestProtoAssemblerOrder(t *testing.T) {
	rec := bytes.Repeat([]byte{1}, 2*chunkData+5)
	chunks := encodeMeta(rec)
	dec := func(b []byte) message {
		m, err := decode(b)
		require.NoError(t, err)
		return m
	}
	tests := []struct {
		name  string
		order []int
	}{
		{"second first", []int{1}},
		{"repeat", []int{0, 0}},
		{"skip", []int{0, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asm assembler
			var err error
			for _, i := range tt.order {
				if _, _, err = asm.add(dec(chunks[i])); err != nil {
					break
				}
			}
			require.ErrorIs(t, err, ErrProtocol)
		})
	}
	t.Run("other total", func(t *testing.T) {
		var asm assembler
		_, _, err := asm.add(dec(chunks[0]))
		require.NoError(t, err)
		other := encodeMeta(bytes.Repeat([]byte{1}, 2*chunkData+6))
		_, _, err = asm.add(dec(other[1]))
		require.ErrorIs(t, err, ErrProtocol)
	})
}

// FuzzDecode: no input makes decode or the assembler panic or accept an
// inconsistent message; a decoded hello re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(encodeHello("agent", 1, 2, 3, true))
	f.Add(encodeInvalidate(5))
	f.Add(encodeNotify([]byte("x")))
	f.Add(encodeRefuse("no"))
	for _, c := range encodeMeta([]byte("record")) {
		f.Add(c)
	}
	f.Add([]byte{'g', 'A', 1, 2, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not match ErrProtocol", err)
			}
			return
		}
		switch m.typ {
		case msgHello:
			if m.incarnation == 0 || m.name == "" || len(m.name) > 255 {
				t.Fatalf("bad hello accepted: %+v", m)
			}
			if re := encodeHello(m.name, m.incarnation, m.expect, m.version, m.wantMeta); !bytes.Equal(re, b) {
				t.Fatalf("hello re-encodes to %x, not %x", re, b)
			}
		case msgMetaChunk:
			if m.total == 0 || m.total > meta.MaxRecord || uint64(m.off)+uint64(len(m.data)) > uint64(m.total) {
				t.Fatalf("bad chunk accepted: total %d off %d len %d", m.total, m.off, len(m.data))
			}
			var asm assembler
			rec, done, err := asm.add(m)
			if err == nil && done && len(rec) != int(m.total) {
				t.Fatalf("record of %d bytes, want %d", len(rec), m.total)
			}
		case msgNotify:
			if len(m.data) > MaxNotify {
				t.Fatalf("notification of %d bytes", len(m.data))
			}
		case msgInvalidate, msgRefuse:
		default:
			t.Fatalf("unknown type %d accepted", m.typ)
		}
	})
}
