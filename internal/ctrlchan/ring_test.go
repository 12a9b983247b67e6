package ctrlchan

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/wire"
)

// testRing is a ring of size bytes in Go memory (8-byte aligned), seen
// from both sides: the producer granted window messages of windowBytes.
func testRing(size, window, windowBytes uint64) (*txRing, *rxRing) {
	words := make([]uint64, (ringHdr+size)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), ringHdr+size)
	return &txRing{ringMem: newRingMem(mem, size), grantN: window, grantB: windowBytes},
		&rxRing{ringMem: newRingMem(mem, size)}
}

func ringMsg(i, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(i*7 + k)
	}
	return b
}

// TestRingWrapAround: records of every size modulo 8 and up to the
// largest, their bytes and their headers crossing the end of the ring,
// come out whole and in order, many times round.
func TestRingWrapAround(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  uint64
		sizes func(i int) int
	}{
		{"small records", 256, func(i int) int { return i % 41 }},
		{"exactly at the end", 64, func(i int) int { return 8 * (i % 3) }},
		{"largest", recLen(wire.MaxAppMsg) + 24, func(i int) int { return wire.MaxAppMsg - i%9 }},
		{"mixed", 3 * recLen(wire.MaxAppMsg), func(i int) int { return []int{0, 1, wire.MaxAppMsg, 13, 4096, 7}[i%6] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, rx := testRing(tc.size, 1<<20, 1<<40)
			wrapped := 0
			for i := range 500 {
				m := ringMsg(i, tc.sizes(i))
				ok, err := tx.fits(len(m))
				require.NoError(t, err)
				require.True(t, ok, "record %d", i)
				before := tx.tail % tx.size
				tx.push(m)
				if tx.tail%tx.size < before && tx.tail%tx.size != 0 {
					wrapped++
				}
				require.True(t, rx.pending())
				got, ok, err := rx.pop()
				require.NoError(t, err)
				require.True(t, ok)
				require.True(t, bytes.Equal(m, got), "record %d", i)
				require.False(t, rx.pending())
				rx.ret(1, uint64(len(m)))
			}
			require.NotZero(t, wrapped, "no record crossed the end")
			_, ok, err := rx.pop()
			require.NoError(t, err)
			require.False(t, ok)
		})
	}
}

// TestRingFull: the producer may not write beyond the window's messages,
// its bytes or the ring's room; what the consumer returns frees them.
func TestRingFull(t *testing.T) {
	for _, tc := range []struct {
		name                string
		size, window, bytes uint64
		msg                 int
		fit                 int // records that fit
	}{
		{"messages", 4096, 3, 1 << 20, 8, 3},
		{"bytes", 4096, 100, 100, 40, 2},
		{"room", 128, 100, 1 << 20, 24, 4}, // 32 bytes a record
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, rx := testRing(tc.size, tc.window, tc.bytes)
			for round := range 3 {
				for i := range tc.fit {
					ok, err := tx.fits(tc.msg)
					require.NoError(t, err)
					require.True(t, ok, "round %d record %d", round, i)
					tx.push(ringMsg(i, tc.msg))
				}
				ok, err := tx.fits(tc.msg)
				require.NoError(t, err)
				require.False(t, ok, "round %d: full", round)
				for range tc.fit {
					_, ok, err := rx.pop()
					require.NoError(t, err)
					require.True(t, ok)
				}
				ok, err = tx.fits(tc.msg)
				require.NoError(t, err)
				require.False(t, ok, "taken but not returned yet")
				rx.ret(uint64(tc.fit), uint64(tc.fit*tc.msg))
			}
		})
	}
}

// TestRingHostile: a producer writing garbage is caught before anything
// outside the ring is read; a consumer returning more than was written is
// caught by the producer.
func TestRingHostile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(tx *txRing, rx *rxRing)
		want    string
	}{
		{"tail beyond the ring", func(tx *txRing, _ *rxRing) { tx.word(offTail).Store(tx.size + 8) }, "past the head"},
		{"tail behind the head", func(tx *txRing, _ *rxRing) { tx.word(offTail).Store(^uint64(7)) }, "past the head"},
		{"tail short of the record", func(tx *txRing, _ *rxRing) { tx.word(offTail).Store(tx.tail - 8) }, "beyond the tail"},
		{"tail unaligned", func(tx *txRing, _ *rxRing) { tx.word(offTail).Store(tx.tail + 3) }, "past the head"},
		{"header", func(tx *txRing, _ *rxRing) { tx.data[0] ^= 1 }, "corrupt record header"},
		{"too large", func(tx *txRing, _ *rxRing) {
			n := uint32(wire.MaxAppMsg + 1)
			binary.LittleEndian.PutUint64(tx.data, uint64(n)|uint64(^n)<<32)
		}, "max"},
		{"beyond the tail", func(tx *txRing, _ *rxRing) {
			n := uint32(100)
			binary.LittleEndian.PutUint64(tx.data, uint64(n)|uint64(^n)<<32)
		}, "beyond the tail"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, rx := testRing(1024, 16, 1<<20)
			tx.push(ringMsg(1, 16))
			tc.corrupt(tx, rx)
			_, ok, err := rx.pop()
			require.False(t, ok)
			require.ErrorContains(t, err, tc.want)
		})
	}
	for _, tc := range []struct {
		name string
		off  int
		v    uint64
	}{
		{"messages", offRetMsgs, 2},
		{"bytes", offRetBytes, 17},
		{"position", offRetPos, 48},
	} {
		t.Run("returns "+tc.name, func(t *testing.T) {
			tx, _ := testRing(1024, 16, 1<<20)
			tx.push(ringMsg(1, 16))
			tx.word(tc.off).Store(tc.v)
			_, err := tx.fits(1)
			require.ErrorContains(t, err, "returns beyond what was written")
		})
	}
}

// FuzzRingPop: whatever a producer writes into the ring (its tail, its
// records), the consumer's pop never panics nor reads outside the ring,
// and what it returns fits between its head and the tail.
func FuzzRingPop(f *testing.F) {
	tx, _ := testRing(256, 64, 1<<20)
	for i := range 5 {
		tx.push(ringMsg(i, i*9))
	}
	f.Add(tx.mem[ringHdr:], tx.tail, uint64(0))
	f.Add(tx.mem[ringHdr:], tx.tail+256, uint64(256))
	f.Add([]byte{}, uint64(8), uint64(0))
	f.Add(bytes.Repeat([]byte{0xff}, 300), uint64(1<<63), uint64(1<<63-8))
	f.Fuzz(func(t *testing.T, data []byte, tail, head uint64) {
		_, rx := testRing(256, 64, 1<<20)
		copy(rx.data, data)
		head &^= 7
		rx.head = head
		rx.word(offTail).Store(tail)
		for range 64 {
			before := rx.head
			b, ok, err := rx.pop()
			if err != nil || !ok {
				if rx.head != before {
					t.Fatal("a failed pop moved the head")
				}
				return
			}
			if uint64(len(b)) > wire.MaxAppMsg || rx.head-before != recLen(uint64(len(b))) || tail-rx.head > tail-before {
				t.Fatalf("popped %d bytes moving the head %d to %d (tail %d)", len(b), before, rx.head, tail)
			}
		}
	})
}

// FuzzRingCredit: whatever a consumer writes as its returns (position,
// messages, bytes), the producer's credit never exceeds the window it
// was granted nor the ring's room, and a record it then writes stays
// inside the ring and comes out whole.
func FuzzRingCredit(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(0), uint8(3), uint8(40))
	f.Add(uint64(96), uint64(2), uint64(80), uint8(3), uint8(40))
	f.Add(^uint64(0), ^uint64(0), ^uint64(0), uint8(1), uint8(0))
	f.Add(uint64(8), uint64(1), uint64(1), uint8(7), uint8(200))
	f.Fuzz(func(t *testing.T, pos, rn, rb uint64, written, size uint8) {
		n := int(size % 64)
		tx, rx := testRing(256, 8, 1<<12)
		for i := range int(written % 9) {
			if ok, err := tx.fits(n); err != nil || !ok {
				break
			}
			tx.push(ringMsg(i, n))
			if _, _, err := rx.pop(); err != nil {
				t.Fatal(err)
			}
		}
		tx.word(offRetPos).Store(pos)
		tx.word(offRetMsgs).Store(rn)
		tx.word(offRetBytes).Store(rb)
		cn, cb, room, err := tx.credit()
		if err != nil {
			return
		}
		if cn > tx.grantN || cb > tx.grantB || room > tx.size {
			t.Fatalf("credit %d messages, %d bytes, %d room (window %d, %d; ring %d)", cn, cb, room, tx.grantN, tx.grantB, tx.size)
		}
		m := ringMsg(99, n)
		ok, err := tx.fits(len(m))
		if err != nil || !ok {
			return
		}
		rx.head = tx.tail
		tx.push(m)
		got, ok, err := rx.pop()
		if err != nil || !ok || !bytes.Equal(got, m) {
			t.Fatalf("record after the returns: %v %v", ok, err)
		}
	})
}
