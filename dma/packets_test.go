package dma

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

// The expected bytes are written out by hand from gaudi-uapi.md §7.1/7.2:
// tsize u32 @0, ctl u32 @4, src u64 @8, dst u64 @16, little endian.
func TestEncodeLinDMAGolden(t *testing.T) {
	tests := []struct {
		name     string
		model    Model
		dst, src uint64
		size     uint32
		flags    PacketFlags
		want     string
	}{
		{"gaudi1 plain", ModelGaudi1, 0x20_0000_1000, 0x1000_0000_0040, 4096, 0,
			"00100000 08000049 4000000000100000 0010000020000000"},
		{"gaudi1 MB", ModelGaudi1, 0x20_0000_1000, 0x1000_0000_0040, 4096, MB,
			"00100000 080000c9 4000000000100000 0010000020000000"},
		{"gaudi1 EB|MB", ModelGaudi1, 0x20_0000_1000, 0x1000_0000_0040, 1, EB | MB,
			"01000000 080000e9 4000000000100000 0010000020000000"},
		{"gaudi1 dst masked to 56 bits", ModelGaudi1, 0xab00_0020_0000_1000, 0x1000_0000_0040, 4096, 0,
			"00100000 08000049 4000000000100000 0010000020000000"},
		{"gaudi2 plain", ModelGaudi2, 0xff00_1001_0000_0000, 0xffff_8000_0000_0007, 7, 0,
			"07000000 00000009 070000000080ffff 00000000011000ff"},
		{"gaudi2 MB", ModelGaudi2, 0x1001_0000_0000, 0x2000, 0x8000_0000, MB,
			"00000080 00000089 0020000000000000 0000000001100000"},
		{"gaudi2 EB", ModelGaudi2, 0x1001_0000_0000, 0x2000, 0xffff_ffff, EB,
			"ffffffff 00000029 0020000000000000 0000000001100000"},
		{"gaudi3 like gaudi2", ModelGaudi3, 0x1001_0000_0000, 0x2000, 16, MB,
			"10000000 00000089 0020000000000000 0000000001100000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := make([]byte, 32)
			for i := range buf {
				buf[i] = 0xee
			}
			n := EncodeLinDMA(buf, tt.model, tt.dst, tt.src, tt.size, tt.flags)
			require.Equal(t, 24, n)
			require.Equal(t, unhex(t, tt.want), buf[:24])
			require.Equal(t, unhex(t, "eeeeeeeeeeeeeeee"), buf[24:], "wrote past the packet")
		})
	}
}

func TestEncodeMemsetGolden(t *testing.T) {
	tests := []struct {
		name  string
		model Model
		flags PacketFlags
		want  string
	}{
		{"gaudi1", ModelGaudi1, 0, "00000001 18000049 abababababababab 0000100020000000"},
		{"gaudi1 MB", ModelGaudi1, MB, "00000001 180000c9 abababababababab 0000100020000000"},
		{"gaudi2", ModelGaudi2, 0, "00000001 10000009 abababababababab 0000100020000000"},
		{"gaudi2 MB", ModelGaudi2, MB, "00000001 10000089 abababababababab 0000100020000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := make([]byte, 24)
			n := EncodeMemset(buf, tt.model, 0x20_0010_0000, 0xabab_abab_abab_abab, 1<<24, tt.flags)
			require.Equal(t, 24, n)
			require.Equal(t, unhex(t, tt.want), buf)
		})
	}
}

func TestEncodeNOPGolden(t *testing.T) {
	for _, tt := range []struct {
		flags PacketFlags
		want  string
	}{
		{0, "00000000 0000000a"},
		{EB, "00000000 0000002a"},
		{MB, "00000000 0000008a"},
		{EB | MB, "00000000 000000aa"},
	} {
		buf := []byte{1, 2, 3, 4, 5, 6, 7, 8}
		require.Equal(t, 8, EncodeNOP(buf, tt.flags))
		require.Equal(t, unhex(t, tt.want), buf, "flags %v", tt.flags)
	}
}

func TestEncodeShortBufferPanics(t *testing.T) {
	require.Panics(t, func() { EncodeLinDMA(make([]byte, 23), ModelGaudi2, 0, 0, 1, 0) })
	require.Panics(t, func() { EncodeNOP(make([]byte, 7), 0) })
}

// pkt is a decoded LIN_DMA packet.
type pkt struct {
	size     uint32
	ctl      uint32
	src, dst uint64
}

func decodeLinDMAs(t *testing.T, b []byte) []pkt {
	t.Helper()
	require.Zero(t, len(b)%LinDMASize)
	var out []pkt
	for ; len(b) > 0; b = b[LinDMASize:] {
		out = append(out, pkt{
			size: binary.LittleEndian.Uint32(b[0:]),
			ctl:  binary.LittleEndian.Uint32(b[4:]),
			src:  binary.LittleEndian.Uint64(b[8:]),
			dst:  binary.LittleEndian.Uint64(b[16:]),
		})
	}
	return out
}

// testCB is a CB with a plain buffer on a bare Device: encoding only.
func testCB(m Model, capacity int) *CB {
	return &CB{d: &Device{}, model: m, buf: make([]byte, capacity), cap: capacity, va: 0xfff0_0000_1000, handle: 0x1000_0000_0000_5000}
}

func TestCBSplit5GiB(t *testing.T) {
	const (
		src = uint64(0x7f00_0000_0000)
		dst = uint64(0x1001_0000_0000)
	)
	cb := testCB(ModelGaudi2, 100)
	require.NoError(t, cb.AddLinDMA(dst, src, 5<<30))
	require.Equal(t, 72, cb.Len())
	require.Equal(t, 28, cb.Remaining())
	ctl := uint32(0x89000000)
	require.Equal(t, []pkt{
		{size: 1 << 31, ctl: ctl, src: src, dst: dst},
		{size: 1 << 31, ctl: ctl, src: src + 2<<30, dst: dst + 2<<30},
		{size: 1 << 30, ctl: ctl, src: src + 4<<30, dst: dst + 4<<30},
	}, decodeLinDMAs(t, cb.Bytes()))
}

func TestCBSplitBoundaries(t *testing.T) {
	for _, tt := range []struct {
		size  uint64
		sizes []uint32
	}{
		{1, []uint32{1}},
		{hlsys.LinDMAMaxTSize - 1, []uint32{hlsys.LinDMAMaxTSize - 1}},
		{hlsys.LinDMAMaxTSize, []uint32{hlsys.LinDMAMaxTSize}},
		{hlsys.LinDMAMaxTSize + 1, []uint32{hlsys.LinDMAMaxTSize, 1}},
		{4<<30 + 3, []uint32{hlsys.LinDMAMaxTSize, hlsys.LinDMAMaxTSize, 3}},
	} {
		cb := testCB(ModelGaudi1, 1024)
		require.NoError(t, cb.AddLinDMA(0x20_0000_0000, 0x1000, tt.size))
		var got []uint32
		var off uint64
		for _, p := range decodeLinDMAs(t, cb.Bytes()) {
			require.Equal(t, uint32(0xc9000008), p.ctl)
			require.Equal(t, 0x20_0000_0000+off, p.dst)
			require.Equal(t, 0x1000+off, p.src)
			got = append(got, p.size)
			off += uint64(p.size)
		}
		require.Equal(t, tt.sizes, got, "size %d", tt.size)
	}
}

func TestCBFullAppendsNothing(t *testing.T) {
	cb := testCB(ModelGaudi2, 3*LinDMASize-1)
	require.NoError(t, cb.AddLinDMA(0x1000, 0x2000, 64))
	before := append([]byte(nil), cb.Bytes()...)
	err := cb.AddLinDMA(0x1000, 0x2000, 2<<30+1) // 2 packets, 1 fits
	require.ErrorIs(t, err, ErrCBFull)
	require.Equal(t, before, cb.Bytes())
	require.ErrorIs(t, cb.AddMemset(0x1000, 0, 2<<30+1), ErrCBFull)
	require.NoError(t, cb.AddLinDMA(0x1000, 0x2000, 1))
	require.Equal(t, 23, cb.Remaining())
	require.NoError(t, cb.AddNOP(EB|MB))
	require.NoError(t, cb.AddNOP(EB|MB))
	require.ErrorIs(t, cb.AddNOP(EB|MB), ErrCBFull) // 7 bytes left
	cb.Reset()
	require.Zero(t, cb.Len())
	require.Equal(t, cb.Cap(), cb.Remaining())
}

func TestCBInvalid(t *testing.T) {
	cb := testCB(ModelGaudi1, 256)
	require.ErrorIs(t, cb.AddLinDMA(0x1000, 0x2000, 0), ErrInvalid)
	require.ErrorIs(t, cb.AddMemset(0x1000, 0, 0), ErrInvalid)
	require.ErrorIs(t, cb.AddLinDMA(^uint64(0)-10, 0x2000, 100), ErrInvalid)
	require.ErrorIs(t, cb.AddLinDMA(0x1000, ^uint64(0)-10, 100), ErrInvalid)
	require.ErrorIs(t, cb.AddLinDMA(1<<56, 0x2000, 1), ErrInvalid, "Gaudi1 dst beyond 56 bits")
	require.Zero(t, cb.Len())
}

func TestCBChunk(t *testing.T) {
	g2 := testCB(ModelGaudi2, 64)
	require.NoError(t, g2.AddNOP(EB|MB))
	require.Equal(t, Chunk{Handle: 0xfff0_0000_1000, Queue: 5, Size: 8, UserCB: true}, g2.Chunk(5))
	require.Equal(t, hlsys.CSChunk{CBHandle: 0xfff0_0000_1000, QueueIndex: 5, CBSize: 8,
		Flags: hlsys.CSChunkFlagsUserAllocCB}, g2.Chunk(5).raw())
	g1 := testCB(ModelGaudi1, 64)
	require.NoError(t, g1.AddLinDMA(0x1000, 0x2000, 3))
	require.Equal(t, Chunk{Handle: 0x1000_0000_0000_5000, Queue: 2, Size: 24}, g1.Chunk(2))
	require.Equal(t, hlsys.CSChunk{CBHandle: 0x1000_0000_0000_5000, QueueIndex: 2, CBSize: 24}, g1.Chunk(2).raw())
}
