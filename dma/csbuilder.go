package dma

import (
	"fmt"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// MaxLinDMASize is the most bytes one LIN_DMA packet moves (its transfer
// size is 32 bits; the driver and hl-thunk stay at 2 GiB). Longer copies
// take several packets.
const MaxLinDMASize = hlsys.LinDMAMaxTSize

// MaxCBSize is the largest command buffer the driver takes (HL_MAX_CB_SIZE
// less room for two MSG_PROT packets).
const MaxCBSize = hlsys.MaxCBSize

// MaxChunksPerCS is the most chunks (command buffers) one CS may have.
const MaxChunksPerCS = hlsys.MaxJobsPerCS

// trailingNOP reports whether the model's CBs end with a NOP carrying
// EB|MB: on Gaudi2 (and Gaudi3) the CB's completion is signalled when the
// QMAN has fetched the last packet, not when the DMA engine has finished
// it; the barrier NOP makes the completion wait for the engine
// (gaudi-uapi §7.3). Gaudi1's external queues complete the CB after the
// engine, through the kernel CB's appended completion packets.
//
// Gaudi3 needs none: every LIN_PDMA advances the channel's completion
// counter once its data is written (gaudi3.go).
func (m Model) trailingNOP() bool { return m == ModelGaudi2 }

// CBSizeRange is the command buffer sizes (CSOptions.CBSize) the model
// takes: from room for one copy packet and the seal, up to MaxCBSize (the
// driver's limit) or, on Gaudi3, half a PDMA ring (Submit copies a chunk
// into the ring).
func (m Model) CBSizeRange() (low, high int) {
	high = MaxCBSize
	if m.direct() {
		high = g3MaxChunk
	}
	return m.copyPacketSize() + m.sealReserve(), high
}

// sealReserve is the room every CB keeps for its seal.
func (m Model) sealReserve() int {
	if m.trailingNOP() {
		return NOPSize
	}
	return 0
}

// linDMAPackets is the number of LIN_DMA packets a copy of n bytes takes
// when it is cut in pieces of at most piece bytes (0: not cut).
func linDMAPackets(n, piece uint64) int {
	if piece == 0 || piece >= n {
		return int(linDMACount(n))
	}
	full := n / piece
	p := int(full * linDMACount(piece))
	if rem := n % piece; rem > 0 {
		p += int(linDMACount(rem))
	}
	return p
}

// CSOptions configures a CSBuilder.
type CSOptions struct {
	// Queues are the queues (streams) the CS runs on, one command buffer
	// each: Device.H2DQueues, D2HQueues or D2DQueues. Required.
	Queues []uint32
	// CBSize is the capacity in bytes of each command buffer, at most
	// MaxCBSize. Required.
	CBSize int
	// PieceSize cuts every copy into pieces of at most this many bytes,
	// spread round robin over Queues (so that one large copy runs on all
	// the streams). 0 keeps each copy whole on one queue (cut only into as
	// many LIN_DMA packets as MaxLinDMASize needs) when one has room for
	// all its packets; else they go to the queues with room.
	PieceSize uint64
	// NewCB, if set, supplies the command buffers (e.g. from a pool): an
	// empty CB of at least CBSize bytes made on the builder's Device. nil
	// means Device.NewCB(CBSize). A CB it returns is the builder's (see
	// Release); one the builder cannot use (too small, of another
	// Device) is closed at once and the call needing it fails with
	// ErrInvalid.
	NewCB func() (*CB, error)
	// OneQueue puts the whole CS on one of Queues: the one the device's
	// round robin picked last, which it does not advance. Consecutive
	// one-queue CSs so share a queue, and the next round-robin placement
	// moves past it (work that follows a CS that hung there is not put
	// behind it).
	OneQueue bool
}

// CSBuilder assembles one command submission (CS) of copies and memsets
// for a Device: it knows the model's packets (LIN_DMA, cut at
// MaxLinDMASize), keeps one command buffer per queue, spreads pieces over
// the queues round robin, tells when the CS is full, and seals it as the
// model needs (a trailing NOP with EB|MB on Gaudi2/3) into the chunks
// Submit takes.
//
// Use: NewCSBuilder, then Fits / AddCopy / AddMemset while the CS has room,
// Seal, Device.Submit(chunks), and once the CS has retired (Wait) Release
// the command buffers. A CSBuilder is used by one goroutine at a time; it
// is not reused after Seal.
type CSBuilder struct {
	d      *Device
	queues []uint32
	cbSize int
	piece  uint64
	newCB  func() (*CB, error)
	cbs    []*CB
	// cbBuf and chunkBuf back cbs and Seal's chunks for a CS on up to
	// two queues (the usual one or two streams): no allocation for them.
	cbBuf    [2]*CB
	chunkBuf [2]Chunk
	packets  int
	bytes    uint64
	sealed   bool
	oneQ     bool // CSOptions.OneQueue: the round robin is not advanced
}

// NewCSBuilder starts an empty CS on the queues of o. It fails with
// ErrNotSupported when o.Queues is empty (a Gaudi3 whose driver leaves no
// PDMA channel to users) and ErrInvalid when o.CBSize cannot hold one LIN_DMA packet and
// the seal, or exceeds MaxCBSize.
func (d *Device) NewCSBuilder(o CSOptions) (*CSBuilder, error) {
	b := &CSBuilder{}
	if err := d.InitCSBuilder(b, o); err != nil {
		return nil, err
	}
	return b, nil
}

// InitCSBuilder is NewCSBuilder into a builder the caller holds (one it
// keeps for its next CS, say, once Release gave back the last one's
// command buffers): b is reset to an empty CS on the queues of o. On an
// error b is left as it was.
func (d *Device) InitCSBuilder(b *CSBuilder, o CSOptions) error {
	const op = "new CS builder"
	if len(o.Queues) == 0 {
		return newErr(op, ErrNotSupported, "no known DMA queues for "+d.model.String(), nil)
	}
	if len(o.Queues) > MaxChunksPerCS {
		return newErr(op, ErrInvalid, fmt.Sprintf("%d queues, a CS holds at most %d chunks", len(o.Queues), MaxChunksPerCS), nil)
	}
	if low, high := d.model.CBSizeRange(); o.CBSize < low || o.CBSize > high {
		return newErr(op, ErrInvalid, fmt.Sprintf("command buffer size %d not in [%d, %d]",
			o.CBSize, low, high), nil)
	}
	qs := o.Queues
	if o.OneQueue {
		i := int(d.rr.Load()) % len(qs)
		qs = qs[i : i+1]
	}
	*b = CSBuilder{d: d, queues: qs, cbSize: o.CBSize, piece: o.PieceSize, newCB: o.NewCB, oneQ: o.OneQueue}
	if len(qs) <= len(b.cbBuf) {
		b.cbs = b.cbBuf[:len(qs)]
	} else {
		b.cbs = make([]*CB, len(qs))
	}
	if b.newCB == nil {
		b.newCB = func() (*CB, error) { return d.NewCB(o.CBSize) }
	}
	return nil
}

// perCB is the number of LIN_DMA packets an empty command buffer holds
// besides its seal.
func (b *CSBuilder) perCB() int {
	return (b.cbSize - b.d.model.sealReserve()) / b.d.model.copyPacketSize()
}

// Capacity is the number of LIN_DMA packets an empty CS holds.
func (b *CSBuilder) Capacity() int { return len(b.queues) * b.perCB() }

// Packets is the number of LIN_DMA packets a copy (or memset) of n bytes
// takes in this CS.
func (b *CSBuilder) Packets(n uint64) int { return linDMAPackets(n, b.piece) }

// Fits reports whether a copy of n bytes fits in what is left of the CS.
func (b *CSBuilder) Fits(n uint64) bool {
	if b.sealed {
		return false
	}
	free := 0
	for _, cb := range b.cbs {
		if cb == nil {
			free += b.perCB()
		} else {
			free += b.room(cb) / b.d.model.copyPacketSize()
		}
	}
	return free >= b.Packets(n)
}

// room is the space of cb left for packets other than the seal.
func (b *CSBuilder) room(cb *CB) int { return cb.Remaining() - b.d.model.sealReserve() }

// Len is the number of LIN_DMA packets added so far.
func (b *CSBuilder) Len() int { return b.packets }

// Bytes is the number of bytes the CS copies or fills so far.
func (b *CSBuilder) Bytes() uint64 { return b.bytes }

// cb returns the command buffer of queue s, getting one if needed.
func (b *CSBuilder) cb(s int) (*CB, error) {
	if b.cbs[s] != nil {
		return b.cbs[s], nil
	}
	cb, err := b.newCB()
	if err != nil {
		return nil, err
	}
	if cb == nil || cb.d != b.d || cb.Cap() < b.cbSize {
		// The CB was handed over: the builder closes what it cannot use.
		_ = cb.Close()
		return nil, newErr("get command buffer", ErrInvalid, "CSOptions.NewCB returned no CB of this device with the configured size", nil)
	}
	b.cbs[s] = cb
	return cb, nil
}

// Reserve makes sure the CS has a command buffer on every queue, so that
// a later AddCopy or AddMemset that Fits cannot fail for want of one.
func (b *CSBuilder) Reserve() error {
	for s := range b.cbs {
		if _, err := b.cb(s); err != nil {
			return err
		}
	}
	return nil
}

// AddCopy appends a copy of n bytes from src to dst (device-side
// addresses: DeviceMem.Addr, HostMapping.DeviceAddr), cut into pieces
// (CSOptions.PieceSize) each placed on the next queue round robin, or on
// the first queue with room if that one is full. An error wrapping
// ErrCBFull means the copy did not fit (check Fits first); the CS may then
// hold part of the copy and should be dropped (Release) rather than
// submitted.
func (b *CSBuilder) AddCopy(dst, src, n uint64) error {
	return b.add("add copy to CS", dst, src, n, false)
}

// AddMemset appends a fill of n bytes at dst with the 64-bit pattern
// value (see EncodeMemset), placed like AddCopy.
func (b *CSBuilder) AddMemset(dst, value, n uint64) error {
	return b.add("add memset to CS", dst, value, n, true)
}

// add places a copy from src (or, for a memset, a fill with the pattern
// src) piece by piece.
func (b *CSBuilder) add(op string, dst, src, n uint64, memset bool) error {
	if b.sealed {
		return newErr(op, ErrInvalid, "the CS is sealed", nil)
	}
	if n == 0 {
		return newErr(op, ErrInvalid, "size 0", nil)
	}
	piece := b.piece
	if piece == 0 {
		piece = n
	}
	for off := uint64(0); off < n; off += piece {
		m := min(piece, n-off)
		need := int(linDMACount(m)) * b.d.model.copyPacketSize()
		s := 0
		if !b.oneQ {
			s = int(b.d.rr.Add(1)) % len(b.queues)
		}
		cb, err := b.cb(s)
		if err != nil {
			return err
		}
		if b.room(cb) < need {
			// Fall back to any queue with room.
			cb = b.withRoom(need)
		}
		if cb == nil {
			// No command buffer holds the whole piece (several packets):
			// its packets go where there is room, one by one, as Fits
			// counted them.
			for po := uint64(0); po < m; po += MaxLinDMASize {
				if err := b.put(op, b.withRoom(b.d.model.copyPacketSize()), dst+off+po, src, off+po, min(MaxLinDMASize, m-po), memset); err != nil {
					return err
				}
			}
			continue
		}
		if err := b.put(op, cb, dst+off, src, off, m, memset); err != nil {
			return err
		}
	}
	b.bytes += n
	return nil
}

// withRoom is the first command buffer with need bytes left for packets,
// or nil.
func (b *CSBuilder) withRoom(need int) *CB {
	for t := range b.queues {
		if c, err := b.cb(t); err == nil && b.room(c) >= need {
			return c
		}
	}
	return nil
}

// put adds m bytes at offset off of a copy from src (or a fill with the
// pattern src) to dst in cb, which nil says is not there.
func (b *CSBuilder) put(op string, cb *CB, dst, src, off, m uint64, memset bool) error {
	if cb == nil {
		need := int(linDMACount(m)) * b.d.model.copyPacketSize()
		return newErr(op, ErrCBFull, fmt.Sprintf("no command buffer has %d bytes left", need), nil)
	}
	var err error
	if memset {
		err = cb.AddMemset(dst, src, m)
	} else {
		err = cb.AddLinDMA(dst, src+off, m)
	}
	if err != nil {
		return err
	}
	b.packets += int(linDMACount(m))
	return nil
}

// Seal ends the CS as the model needs (on Gaudi2/3 every non-empty
// command buffer gets a trailing NOP with EB|MB, so that the CS completes
// only when its DMA engine has finished) and returns its chunks, one per
// non-empty command buffer, for Device.Submit. Nothing can be added after
// Seal; an empty CS gives no chunks. The command buffers stay the
// builder's until Release, and so may the chunks' slice.
func (b *CSBuilder) Seal() ([]Chunk, error) {
	const op = "seal CS"
	if b.sealed {
		return nil, newErr(op, ErrInvalid, "the CS is already sealed", nil)
	}
	b.sealed = true
	chunks := b.chunkBuf[:0]
	for s, cb := range b.cbs {
		if cb == nil || cb.Len() == 0 {
			continue
		}
		if b.d.model.trailingNOP() {
			if err := cb.AddNOP(EB | MB); err != nil {
				return nil, err
			}
		}
		chunks = append(chunks, cb.Chunk(b.queues[s]))
	}
	return chunks, nil
}

// Release hands every command buffer the builder holds to put (to pool
// them; nil closes them) and forgets them. Call it once the CS has retired
// (or was never submitted): the device may read a CB until then.
func (b *CSBuilder) Release(put func(*CB)) {
	for i, cb := range b.cbs {
		if cb == nil {
			continue
		}
		if put != nil {
			put(cb)
		} else {
			_ = cb.Close()
		}
		b.cbs[i] = nil
	}
}
