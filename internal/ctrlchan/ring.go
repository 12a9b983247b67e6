package ctrlchan

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gxfer/gxfer/wire"
)

// A message ring (wire.MsgRing) is shared memory the receiver creates and
// its peer maps: a header page, then size bytes of records. The peer (the
// producer) appends records and advances the tail; the receiver (the
// consumer) takes them and, in batches as credit returns go on a socket,
// publishes how far it has taken. Positions are byte counts since the
// start that only grow; a record is at position%size.
//
// Header (little-endian, 64-bit words written atomically):
//
//	  0 tail       the producer: end of the last record written
//	  8 tailMsgs   the producer: messages written (statistics)
//	 16 tailBytes  the producer: their bytes (statistics)
//	 64 retPos     the consumer: records up to here are free again
//	 72 retMsgs    the consumer: messages returned as credit
//	 80 retBytes   the consumer: bytes returned as credit
//	128 rxWait     (32-bit) the consumer parked: the producer rings (MsgBell)
//	192 txWait     (32-bit) the producer waits for credit: the consumer rings
//
// A record is a length n (u32), its complement (u32), then n bytes, padded
// to 8: a header never straddles the end of the ring, the bytes may.
//
// Both sides can write all of the memory, so neither trusts what the
// other writes: the consumer keeps its own head and checks every tail and
// record against the ring's bounds and the credit it granted; the
// producer keeps its own tail and checks the returns against what it
// wrote. A violation fails the endpoint (gxerr.Peer).
const (
	ringHdr      = 4096
	offTail      = 0
	offTailMsgs  = 8
	offTailBytes = 16
	offRetPos    = 64
	offRetMsgs   = 72
	offRetBytes  = 80
	offRxWait    = 128
	offTxWait    = 192
	recHdr       = 8
	// maxRingSize bounds the ring a peer may hand us: 16 times the
	// ring of this side's default window (MsgWindow, MsgWindowBytes).
	// This side's messages cycle through all of a peer's ring, and the
	// shared memory they fault in is charged to this process.
	maxRingSize = 64 << 20
)

// ringSize is the record area of a ring granting window messages of
// windowBytes bytes in all: room for every one of them at once (each
// record's header and padding is under 16 bytes), so that the ring never
// runs out before the credit.
func ringSize(window, windowBytes uint64) uint64 {
	return (windowBytes + window*16 + 7) &^ 7
}

// recLen is the ring bytes of a record of n bytes.
func recLen(n uint64) uint64 { return recHdr + (n+7)&^7 }

// validRingSize reports whether a peer's ring of size bytes, granting a
// window of window messages of windowBytes bytes in all, is usable: a
// multiple of 8 that holds a largest message, within maxRingSize, and no
// larger than the window needs (ringSize). A larger one would gain the
// peer nothing but the shared memory this side's messages, cycling
// through the ring, fault in.
func validRingSize(size, window, windowBytes uint64) bool {
	need := ringSize(min(window, maxRingSize), min(windowBytes, maxRingSize))
	return size%8 == 0 && size >= recLen(wire.MaxAppMsg) && size <= maxRingSize && size <= need
}

// ringMem is a ring's memory: mem (8-byte aligned) holds the header page
// and the size bytes of data.
type ringMem struct {
	mem  []byte
	data []byte
	size uint64
}

func newRingMem(mem []byte, size uint64) ringMem {
	return ringMem{mem: mem, data: mem[ringHdr : ringHdr+size], size: size}
}

func (r *ringMem) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off]))
}

func (r *ringMem) flag(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off]))
}

// rxRing is the consumer's side of a ring (its own memory).
type rxRing struct {
	ringMem
	head              uint64 // the next record
	retMsgs, retBytes uint64 // what was published as returned
}

// pending reports whether the producer wrote beyond head.
func (r *rxRing) pending() bool { return r.word(offTail).Load() != r.head }

// pop copies the next record out of the ring: ok false when there is
// none; an error when the producer broke the ring (nothing is read
// outside it).
func (r *rxRing) pop() (b []byte, ok bool, err error) {
	avail := r.word(offTail).Load() - r.head
	if avail == 0 {
		return nil, false, nil
	}
	if avail > r.size || avail%8 != 0 {
		return nil, false, fmt.Errorf("message ring: tail %d bytes past the head (ring of %d)", int64(avail), r.size)
	}
	at := r.head % r.size
	w := binary.LittleEndian.Uint64(r.data[at : at+recHdr])
	n := uint32(w)
	if uint32(w>>32) != ^n {
		return nil, false, fmt.Errorf("message ring: corrupt record header %#x at %d", w, r.head)
	}
	if n > wire.MaxAppMsg {
		return nil, false, fmt.Errorf("message ring: record of %d bytes (max %d)", n, wire.MaxAppMsg)
	}
	rl := recLen(uint64(n))
	if rl > avail {
		return nil, false, fmt.Errorf("message ring: record of %d bytes beyond the tail (%d written)", rl, avail)
	}
	b = make([]byte, n)
	from := (at + recHdr) % r.size
	k := copy(b, r.data[from:])
	copy(b[k:], r.data)
	r.head += rl
	return b, true, nil
}

// ret publishes that the records up to head, msgs messages and bytes
// bytes more, are taken.
func (r *rxRing) ret(msgs, bytes uint64) {
	r.retMsgs += msgs
	r.retBytes += bytes
	r.word(offRetMsgs).Store(r.retMsgs)
	r.word(offRetBytes).Store(r.retBytes)
	r.word(offRetPos).Store(r.head)
}

// arrived is what the producer says it wrote (statistics; unchecked).
func (r *rxRing) arrived() (msgs, bytes uint64) {
	return r.word(offTailMsgs).Load(), r.word(offTailBytes).Load()
}

// txRing is the producer's side of a ring (the peer's memory, mapped).
type txRing struct {
	ringMem
	tail, msgs, bytes uint64 // what this side wrote
	grantN, grantB    uint64 // the window the ring came with
}

// credit is what may still be written: messages, bytes and ring room,
// from the consumer's returns (an error when they are beyond what was
// written).
func (t *txRing) credit() (n, b, room uint64, err error) {
	pos, rn, rb := t.word(offRetPos).Load(), t.word(offRetMsgs).Load(), t.word(offRetBytes).Load()
	if pos > t.tail || t.tail-pos > t.size || rn > t.msgs || rb > t.bytes {
		return 0, 0, 0, fmt.Errorf("message ring: returns beyond what was written (%d/%d messages, %d/%d bytes, position %d/%d)", rn, t.msgs, rb, t.bytes, pos, t.tail)
	}
	n, b = t.grantN-min(t.msgs-rn, t.grantN), t.grantB-min(t.bytes-rb, t.grantB)
	return n, b, t.size - (t.tail - pos), nil
}

// fits reports whether a message of n bytes may be written now.
func (t *txRing) fits(n int) (bool, error) {
	cn, cb, room, err := t.credit()
	if err != nil {
		return false, err
	}
	return cn > 0 && cb >= uint64(n) && room >= recLen(uint64(n)), nil
}

// push writes a record (fits said so) and publishes it.
func (t *txRing) push(b []byte) {
	n := uint32(len(b))
	at := t.tail % t.size
	binary.LittleEndian.PutUint64(t.data[at:at+recHdr], uint64(n)|uint64(^n)<<32)
	from := (at + recHdr) % t.size
	k := copy(t.data[from:], b)
	copy(t.data, b[k:])
	t.tail += recLen(uint64(n))
	t.msgs++
	t.bytes += uint64(n)
	t.word(offTailMsgs).Store(t.msgs)
	t.word(offTailBytes).Store(t.bytes)
	t.word(offTail).Store(t.tail)
}
