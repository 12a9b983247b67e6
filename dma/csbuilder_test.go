package dma

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// cbPkt is a decoded packet of a command buffer.
type cbPkt struct {
	op       uint32 // hlsys.PacketLinDMA or hlsys.PacketNOP
	size     uint32
	src, dst uint64
	eb, mb   bool
	memset   bool
}

// decodeCB decodes the packets of a command buffer: LIN_DMA (24 bytes)
// and NOP (8 bytes), by the opcode in ctl bits 24-28.
func decodeCB(t *testing.T, b []byte) []cbPkt {
	t.Helper()
	var out []cbPkt
	for len(b) > 0 {
		require.GreaterOrEqual(t, len(b), NOPSize)
		ctl := binary.LittleEndian.Uint32(b[4:])
		p := cbPkt{op: ctl >> hlsys.CtlOpcodeShift & 0x1f, eb: ctl&hlsys.CtlEB != 0, mb: ctl&hlsys.CtlMB != 0}
		switch p.op {
		case hlsys.PacketNOP:
			b = b[NOPSize:]
		case hlsys.PacketLinDMA:
			require.GreaterOrEqual(t, len(b), LinDMASize)
			p.size = binary.LittleEndian.Uint32(b[0:])
			p.src = binary.LittleEndian.Uint64(b[8:])
			p.dst = binary.LittleEndian.Uint64(b[16:])
			p.memset = ctl&hlsys.LinDMAMemSet != 0
			b = b[LinDMASize:]
		default:
			t.Fatalf("unexpected opcode %#x", p.op)
		}
		out = append(out, p)
	}
	return out
}

func lin(dst, src uint64, size uint32) cbPkt {
	return cbPkt{op: hlsys.PacketLinDMA, size: size, src: src, dst: dst, mb: true}
}

var sealNOP = cbPkt{op: hlsys.PacketNOP, eb: true, mb: true}

// seal appends the model's seal to a CB's expected packets.
func seal(m Model, ps ...cbPkt) []cbPkt {
	if m == ModelGaudi1 {
		return ps
	}
	return append(ps, sealNOP)
}

const (
	tDst = 0x20_0000_0000 // a Gaudi1 DRAM address, fine for Gaudi2 too (the fake checks nothing)
	tSrc = 0x1000_0000_0000
)

// TestCSBuilder builds CSs on both models and checks every packet, the
// queue of every chunk and the model's sealing. The fake device starts its
// round robin at 0, so a CS's first piece goes to queue index 1 (of 2).
func TestCSBuilder(t *testing.T) {
	const mx = MaxLinDMASize
	type add struct {
		dst, src, n uint64
		memset      bool
	}
	tests := []struct {
		name   string
		cbSize int
		piece  uint64
		adds   []add
		// want: per queue index (of queues {10, 11}), the packets before
		// the seal; nil means no chunk on that queue.
		want    func(m Model) [2][]cbPkt
		packets int
	}{
		{
			name: "one small copy, one queue", cbSize: 4096,
			adds:    []add{{tDst, tSrc, 100, false}},
			want:    func(Model) [2][]cbPkt { return [2][]cbPkt{nil, {lin(tDst, tSrc, 100)}} },
			packets: 1,
		},
		{
			name: "exactly MaxLinDMASize is one packet", cbSize: 4096,
			adds:    []add{{tDst, tSrc, mx, false}},
			want:    func(Model) [2][]cbPkt { return [2][]cbPkt{nil, {lin(tDst, tSrc, mx)}} },
			packets: 1,
		},
		{
			name: "MaxLinDMASize+1 is cut at the boundary", cbSize: 4096,
			adds: []add{{tDst, tSrc, mx + 1, false}},
			want: func(Model) [2][]cbPkt {
				return [2][]cbPkt{nil, {lin(tDst, tSrc, mx), lin(tDst+mx, tSrc+mx, 1)}}
			},
			packets: 2,
		},
		{
			name: "2*MaxLinDMASize is two full packets", cbSize: 4096,
			adds: []add{{tDst, tSrc, 2 * mx, false}},
			want: func(Model) [2][]cbPkt {
				return [2][]cbPkt{nil, {lin(tDst, tSrc, mx), lin(tDst+mx, tSrc+mx, mx)}}
			},
			packets: 2,
		},
		{
			name: "pieces spread round robin", cbSize: 4096, piece: 4 << 20,
			adds: []add{{tDst, tSrc, 10 << 20, false}, {tDst + 64<<20, tSrc, 1, false}},
			want: func(Model) [2][]cbPkt {
				return [2][]cbPkt{
					{lin(tDst+4<<20, tSrc+4<<20, 4<<20), lin(tDst+64<<20, tSrc, 1)},
					{lin(tDst, tSrc, 4<<20), lin(tDst+8<<20, tSrc+8<<20, 2<<20)},
				}
			},
			packets: 4,
		},
		{
			name: "memset pieces keep the pattern", cbSize: 4096, piece: 4096,
			adds: []add{{tDst, 0xabababababababab, 8192, true}},
			want: func(Model) [2][]cbPkt {
				a := lin(tDst+4096, 0xabababababababab, 4096)
				b := lin(tDst, 0xabababababababab, 4096)
				a.memset, b.memset = true, true
				return [2][]cbPkt{{a}, {b}}
			},
			packets: 2,
		},
	}
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		for _, tt := range tests {
			t.Run(m.String()+"/"+tt.name, func(t *testing.T) {
				d, f := openFake(t, m, hlsys.Accel, "6.8")
				cs, err := d.NewCSBuilder(CSOptions{Queues: []uint32{10, 11}, CBSize: tt.cbSize, PieceSize: tt.piece})
				require.NoError(t, err)
				var bytes uint64
				for _, a := range tt.adds {
					require.True(t, cs.Fits(a.n))
					if a.memset {
						require.NoError(t, cs.AddMemset(a.dst, a.src, a.n))
					} else {
						require.NoError(t, cs.AddCopy(a.dst, a.src, a.n))
					}
					bytes += a.n
				}
				require.Equal(t, tt.packets, cs.Len())
				require.Equal(t, bytes, cs.Bytes())
				chunks, err := cs.Seal()
				require.NoError(t, err)
				want := tt.want(m)
				var got [2][]cbPkt
				for _, c := range chunks {
					s := int(c.Queue) - 10
					require.Contains(t, []int{0, 1}, s)
					cb := cs.cbs[s]
					require.Equal(t, uint32(cb.Len()), c.Size)
					if m == ModelGaudi1 {
						require.False(t, c.UserCB)
						require.Equal(t, cb.handle, c.Handle)
					} else {
						require.True(t, c.UserCB)
						require.Equal(t, cb.va, c.Handle)
					}
					got[s] = decodeCB(t, cb.Bytes())
				}
				for s := range want {
					if want[s] == nil {
						require.Nil(t, got[s], "queue %d", s)
						continue
					}
					require.Equal(t, seal(m, want[s]...), got[s], "queue %d", s)
				}
				// The chunks are what Submit takes.
				_, err = d.Submit(chunks)
				require.NoError(t, err)
				f.mu.Lock()
				require.Equal(t, rawChunks(chunks), f.csChunks[len(f.csChunks)-1])
				f.mu.Unlock()
				var released []*CB
				cs.Release(func(cb *CB) { released = append(released, cb) })
				require.Len(t, released, len(chunks))
				for _, cb := range released {
					require.NoError(t, cb.Close())
				}
			})
		}
	}
}

// TestCSBuilderCapacity: what an empty CS holds and when it is full, per
// model. A 72-byte CB holds three LIN_DMAs on Gaudi1 but two on Gaudi2,
// which keeps 8 bytes for the trailing NOP.
func TestCSBuilderCapacity(t *testing.T) {
	tests := []struct {
		model    Model
		cbSize   int
		queues   int
		capacity int
	}{
		{ModelGaudi1, 72, 1, 3},
		{ModelGaudi2, 72, 1, 2},
		{ModelGaudi1, 72, 2, 6},
		{ModelGaudi2, 72, 2, 4},
		{ModelGaudi1, 64 << 10, 4, 4 * (64 << 10 / 24)},
		{ModelGaudi2, 64 << 10, 2, 2 * ((64<<10 - 8) / 24)},
	}
	for _, tt := range tests {
		t.Run(tt.model.String(), func(t *testing.T) {
			d, _ := openFake(t, tt.model, hlsys.Accel, "6.8")
			qs := []uint32{0, 1, 2, 3}[:tt.queues]
			cs, err := d.NewCSBuilder(CSOptions{Queues: qs, CBSize: tt.cbSize})
			require.NoError(t, err)
			defer cs.Release(nil)
			require.Equal(t, tt.capacity, cs.Capacity())
			for i := range tt.capacity {
				require.True(t, cs.Fits(1), "packet %d", i)
				require.NoError(t, cs.AddCopy(tDst+uint64(i), tSrc, 1), "packet %d", i)
			}
			require.False(t, cs.Fits(1), "CS full")
			require.ErrorIs(t, cs.AddCopy(tDst, tSrc, 1), ErrCBFull)
			chunks, err := cs.Seal()
			require.NoError(t, err)
			require.Len(t, chunks, tt.queues)
			for _, c := range chunks {
				require.LessOrEqual(t, int(c.Size), tt.cbSize)
			}
		})
	}
}

func TestCSBuilderPackets(t *testing.T) {
	const mx = MaxLinDMASize
	tests := []struct {
		n, piece uint64
		want     int
	}{
		{1, 0, 1},
		{mx, 0, 1},
		{mx + 1, 0, 2},
		{3 * mx, 0, 3},
		{10 << 20, 4 << 20, 3},
		{8 << 20, 4 << 20, 2},
		{1, 4 << 20, 1},
		{mx + 1, mx, 2},
		{3*mx + 1, 2 * mx, 4}, // pieces larger than a packet: 2+2 packets
	}
	d, _ := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	for _, tt := range tests {
		cs, err := d.NewCSBuilder(CSOptions{Queues: []uint32{0}, CBSize: 4096, PieceSize: tt.piece})
		require.NoError(t, err)
		require.Equal(t, tt.want, cs.Packets(tt.n), "n=%d piece=%d", tt.n, tt.piece)
	}
}

// TestCSBuilderFallback: a piece whose round-robin queue is full goes to
// the first queue with room.
func TestCSBuilderFallback(t *testing.T) {
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			d, _ := openFake(t, m, hlsys.Accel, "6.8")
			cs, err := d.NewCSBuilder(CSOptions{Queues: []uint32{0, 1}, CBSize: LinDMASize + NOPSize})
			require.NoError(t, err)
			defer cs.Release(nil)
			require.NoError(t, cs.AddCopy(tDst, tSrc, 1)) // round robin: queue 1
			d.rr.Add(1)                                   // the next pick is queue 1 again, which is full
			require.NoError(t, cs.AddCopy(tDst+1, tSrc, 1))
			require.Equal(t, []cbPkt{lin(tDst+1, tSrc, 1)}, decodeCB(t, cs.cbs[0].Bytes()))
			require.Equal(t, []cbPkt{lin(tDst, tSrc, 1)}, decodeCB(t, cs.cbs[1].Bytes()))
			require.False(t, cs.Fits(1))
			require.ErrorIs(t, cs.AddCopy(tDst, tSrc, 1), ErrCBFull)
		})
	}
}

// TestCSBuilderSeal: empty command buffers give no chunk, nothing is added
// after Seal, and a CS is sealed once.
func TestCSBuilderSeal(t *testing.T) {
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			d, _ := openFake(t, m, hlsys.Accel, "6.8")
			cs, err := d.NewCSBuilder(CSOptions{Queues: []uint32{0, 1, 2}, CBSize: 4096})
			require.NoError(t, err)
			require.NoError(t, cs.Reserve())
			for s := range cs.cbs {
				require.NotNil(t, cs.cbs[s], "Reserve gets a CB on every queue")
			}
			require.NoError(t, cs.AddCopy(tDst, tSrc, 64))
			chunks, err := cs.Seal()
			require.NoError(t, err)
			require.Len(t, chunks, 1, "only the non-empty CB")
			require.Equal(t, uint32(1), chunks[0].Queue)
			require.Equal(t, seal(m, lin(tDst, tSrc, 64)), decodeCB(t, cs.cbs[1].Bytes()))
			require.Zero(t, cs.cbs[0].Len(), "an empty CB gets no seal")

			require.False(t, cs.Fits(1))
			require.ErrorIs(t, cs.AddCopy(tDst, tSrc, 1), ErrInvalid)
			require.ErrorIs(t, cs.AddMemset(tDst, 0, 1), ErrInvalid)
			_, err = cs.Seal()
			require.ErrorIs(t, err, ErrInvalid)

			live := d.Stats().Live
			cs.Release(nil) // closes the three CBs
			require.Equal(t, live-3, d.Stats().Live)
			cs.Release(nil) // nothing left
		})
	}
	d, _ := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	cs, err := d.NewCSBuilder(CSOptions{Queues: []uint32{0}, CBSize: 4096})
	require.NoError(t, err)
	chunks, err := cs.Seal()
	require.NoError(t, err)
	require.Empty(t, chunks, "an empty CS")
}

func TestCSBuilderOptions(t *testing.T) {
	d, _ := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	_, err := d.NewCSBuilder(CSOptions{CBSize: 4096})
	require.ErrorIs(t, err, ErrNotSupported)
	_, err = d.NewCSBuilder(CSOptions{Queues: []uint32{0}, CBSize: LinDMASize}) // no room for the NOP
	require.ErrorIs(t, err, ErrInvalid)
	_, err = d.NewCSBuilder(CSOptions{Queues: []uint32{0}, CBSize: MaxCBSize + 1})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = d.NewCSBuilder(CSOptions{Queues: make([]uint32, MaxChunksPerCS+1), CBSize: 4096})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = d.NewCSBuilder(CSOptions{Queues: []uint32{0}, CBSize: LinDMASize + NOPSize})
	require.NoError(t, err)

	d1, _ := openFake(t, ModelGaudi1, hlsys.Accel, "6.8")
	cs, err := d1.NewCSBuilder(CSOptions{Queues: []uint32{0}, CBSize: LinDMASize}) // Gaudi1 has no seal
	require.NoError(t, err)
	require.Equal(t, 1, cs.Capacity())

	// NewCB must give a CB of this device, large enough.
	small, err := d.NewCB(64)
	require.NoError(t, err)
	defer func() { require.NoError(t, small.Close()) }()
	cs, err = d.NewCSBuilder(CSOptions{Queues: []uint32{0}, CBSize: 4096, NewCB: func() (*CB, error) { return small, nil }})
	require.NoError(t, err)
	require.ErrorIs(t, cs.AddCopy(tDst, tSrc, 1), ErrInvalid)
	require.ErrorIs(t, cs.AddCopy(tDst, tSrc, 0), ErrInvalid)

	// Gaudi3's queues are unknown: no builder from its (empty) sets.
	d3, _ := openFake(t, ModelGaudi3, hlsys.Accel, "6.8")
	_, err = d3.NewCSBuilder(CSOptions{Queues: d3.H2DQueues(), CBSize: 4096})
	require.ErrorIs(t, err, ErrNotSupported)
}

func rawChunks(cs []Chunk) []hlsys.CSChunk {
	out := make([]hlsys.CSChunk, len(cs))
	for i, c := range cs {
		out[i] = c.raw()
	}
	return out
}

// TestCSBuilderOneQueue: a one-queue CS goes whole to the queue the
// round robin picked last, without advancing it: consecutive one-queue
// CSs share that queue, and the next round-robin piece goes to the queue
// after it.
func TestCSBuilderOneQueue(t *testing.T) {
	d, _ := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	qs := []uint32{0, 1, 4}
	d.rr.Store(4) // last pick: queue index 4%3 = 1
	for range 2 {
		cs, err := d.NewCSBuilder(CSOptions{Queues: qs, CBSize: 4096, PieceSize: 1, OneQueue: true})
		require.NoError(t, err)
		require.NoError(t, cs.AddCopy(tDst, tSrc, 3)) // three pieces, one queue
		chunks, err := cs.Seal()
		require.NoError(t, err)
		require.Len(t, chunks, 1)
		require.Equal(t, uint32(1), chunks[0].raw().QueueIndex)
		cs.Release(nil)
	}
	require.Equal(t, uint32(4), d.rr.Load())
	cs, err := d.NewCSBuilder(CSOptions{Queues: qs, CBSize: 4096})
	require.NoError(t, err)
	defer cs.Release(nil)
	require.NoError(t, cs.AddCopy(tDst, tSrc, 1))
	chunks, err := cs.Seal()
	require.NoError(t, err)
	require.Equal(t, uint32(4), chunks[0].raw().QueueIndex, "round robin: the queue after the one-queue CSs'")
}

// TestCSBuilderFitsMultiPacketPiece: a piece of several LIN_DMA packets
// (PieceSize 0 or above MaxLinDMASize) that Fits accepts is added, also
// when no single command buffer has room for all its packets: Fits
// counts the packets the CS has room for, and AddCopy failed with
// ErrCBFull for a copy Fits had accepted.
func TestCSBuilderFitsMultiPacketPiece(t *testing.T) {
	const mx = MaxLinDMASize
	tests := []struct {
		name   string
		before int    // 1-byte copies added first, one per queue
		n      uint64 // then this copy
	}{
		{"empty CS, 3 packets over 2+2 slots", 0, 2*mx + 1},
		{"1+1 slots left, 2 packets", 2, mx + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
			// Two packets and the seal per command buffer.
			cs, err := d.NewCSBuilder(CSOptions{Queues: []uint32{0, 1}, CBSize: 2*LinDMASize + NOPSize})
			require.NoError(t, err)
			defer cs.Release(nil)
			for i := range tt.before {
				require.NoError(t, cs.AddCopy(tDst+uint64(i), tSrc, 1))
			}
			require.True(t, cs.Fits(tt.n))
			require.NoError(t, cs.AddCopy(tDst+8, tSrc+8, tt.n))
			require.Equal(t, tt.before+cs.Packets(tt.n), cs.Len())
			chunks, err := cs.Seal()
			require.NoError(t, err)
			// Every byte of the copy is in exactly one packet.
			var moved uint64
			for _, cb := range cs.cbs {
				for _, p := range decodeCB(t, cb.Bytes()) {
					if p.op == hlsys.PacketLinDMA && p.dst >= tDst+8 {
						require.Equal(t, p.dst-(tDst+8), p.src-(tSrc+8))
						moved += uint64(p.size)
					}
				}
			}
			require.Equal(t, tt.n, moved)
			require.Len(t, chunks, 2)
		})
	}
}

// TestCSBuilderClosesRejectedCB: a CB that CSOptions.NewCB hands over is
// the builder's (Release closes or pools it), also when the builder
// rejects it (too small, of another device): it is closed then, not left
// live until its Device closes.
func TestCSBuilderClosesRejectedCB(t *testing.T) {
	d := openSim(t, hlsim.ModelGaudi2)
	other := openSim(t, hlsim.ModelGaudi2)
	tests := []struct {
		name string
		from *Device
		size int
	}{
		{"too small", d, 64},
		{"of another device", other, 4096},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.from.Stats().Live
			cs, err := d.NewCSBuilder(CSOptions{Queues: d.H2DQueues(), CBSize: 4096,
				NewCB: func() (*CB, error) { return tt.from.NewCB(tt.size) }})
			require.NoError(t, err)
			require.ErrorIs(t, cs.Reserve(), ErrInvalid)
			require.Equal(t, before, tt.from.Stats().Live, "the rejected CB was closed")
		})
	}
}
