package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// chunk is a metadata chunk message with any total and offset.
func chunk(total, off uint32, data []byte) []byte {
	b := header(msgMetaChunk, 8+len(data))
	b = binary.LittleEndian.AppendUint32(b, total)
	b = binary.LittleEndian.AppendUint32(b, off)
	return append(b, data...)
}

// lenPrefixed joins messages, each behind its 2-byte length.
func lenPrefixed(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}

// FuzzAssembler feeds the assembler the metadata chunks a peer sends in a
// row (the messages of the input, each behind its 2-byte length; those
// that decode as chunks are added, the first error ends the row, as in
// Agent.fetch). A record comes out only whole, made of its chunks' data in
// order; an error wraps ErrProtocol; and the buffer never holds more than
// the record's size nor more than twice the bytes received, whatever size
// the first chunk claims.
func FuzzAssembler(f *testing.F) {
	f.Add(lenPrefixed(chunk(10, 0, []byte("abc")), chunk(10, 3, []byte("def")), chunk(10, 6, []byte("ghij"))))
	f.Add(lenPrefixed(chunk(3, 0, []byte("abc")), chunk(2, 0, []byte("de"))))
	f.Add(lenPrefixed(chunk(1<<20, 0, []byte("a")), chunk(1<<20, 1, []byte("b")), chunk(1<<20, 2, []byte("cd"))))
	f.Add(lenPrefixed(chunk(4, 2, []byte("ab"))))
	f.Add(lenPrefixed(chunk(4, 0, []byte("ab")), chunk(5, 2, []byte("cd"))))
	f.Add(lenPrefixed(chunk(4, 0, []byte("ab")), chunk(4, 1, []byte("cd"))))
	f.Fuzz(func(t *testing.T, in []byte) {
		var (
			asm  assembler
			want []byte // the data of the record's chunks so far
			got  int    // bytes added since the record began
		)
		for len(in) >= 2 {
			n := min(int(binary.LittleEndian.Uint16(in)), len(in)-2)
			b := in[2 : 2+n]
			in = in[2+n:]
			m, err := decode(b)
			if err != nil || m.typ != msgMetaChunk {
				continue
			}
			total := asm.total
			if total == 0 {
				total = m.total
			}
			rec, done, err := asm.add(m)
			if err != nil {
				if !errors.Is(err, ErrProtocol) || done || rec != nil {
					t.Fatalf("add: %v, %v, %x", err, done, rec)
				}
				return
			}
			want = append(want, m.data...)
			got += len(m.data)
			if done {
				if !bytes.Equal(rec, want) || len(rec) != int(total) {
					t.Fatalf("record of %d bytes (want %d): %x, want %x", len(rec), total, rec, want)
				}
				if asm.total != 0 || asm.buf != nil {
					t.Fatalf("assembler not reset after a record: total %d, %d bytes", asm.total, len(asm.buf))
				}
				want, got = nil, 0
				continue
			}
			if rec != nil || asm.total != total || !bytes.Equal(asm.buf, want) {
				t.Fatalf("partial record: %x returned, total %d of %d, holds %x, want %x", rec, asm.total, total, asm.buf, want)
			}
			if c := cap(asm.buf); c > int(total) || c > 2*got {
				t.Fatalf("buffer of %d bytes for %d received of a %d-byte record", c, got, total)
			}
		}
	})
}
