package gaudi3

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// copyPacket is the LIN_PDMA synapse builds for a copy that signals
// completion (pqm_packets.cpp LinPdma::build with barrierMode INTERNAL):
// direction, en_desc_commit, inc_context_id, one completion write and the
// completion-queue advance.
func copyPacket() LinPDMA {
	return LinPDMA{Src: 0xFF70_0000_1234_5678, Dst: 0x0201_0000_8000_0000, Size: 4096, Dir: DirHostToDevice,
		IncContextID: true, DescCommit: true, AdvanceCQ: true,
		WrComp: true, WrCompAddr: 0x0300_007F_FC00_1000, WrCompData: 1<<31 | 1<<24 | 1}
}

func TestEncodeKnownBytes(t *testing.T) {
	b, err := copyPacket().Append(nil)
	require.NoError(t, err)
	require.Len(t, b, LinPDMAWrCompSize)
	le := binary.LittleEndian
	require.Equal(t, uint32(4096), le.Uint32(b[0:]))
	// opcode 9 at 28..24, direction 13, advcnt 12, en_desc_commit 11,
	// inc_context_id 8, wrcomp 1.
	require.Equal(t, uint32(0x09003901), le.Uint32(b[4:]))
	require.Equal(t, uint32(0x12345678), le.Uint32(b[8:]))
	require.Equal(t, uint32(0x80000000), le.Uint32(b[12:]))
	require.Equal(t, uint32(0xFF700000), le.Uint32(b[16:]))
	require.Equal(t, uint32(0x02010000), le.Uint32(b[20:]))
	require.Equal(t, uint32(0xFC001000), le.Uint32(b[24:]))
	require.Equal(t, uint32(0x81000001), le.Uint32(b[28:]))
	require.Equal(t, uint32(0x0300007F), le.Uint32(b[32:]))
	require.Zero(t, le.Uint32(b[36:]))

	n, err := NOP{}.Append(nil)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 0x0A}, n)
}

func TestRoundTrip(t *testing.T) {
	for _, p := range []Packet{
		LinPDMA{}, copyPacket(), LinPDMA{Dst: 1, Src: 0xAB, Size: 1, Memset: true, EngBarrier: true},
		LinPDMA{WrComp: true, Fence: true, FenceAt: FenceData{ID: 2, Target: 0x3FFF, Dec: 1}},
		MsgLong{Addr: 0x0300007FFC5401CC, Value: 1}, MsgLong{Timestamp: true, EngBarrier: true},
		Fence{Wait: FenceData{ID: 1, Target: 1, Dec: 1}, ChID: 31}, NOP{MsgBarrier: true}, NOP{EngBarrier: true},
	} {
		b, err := p.Append([]byte{0xEE})
		require.NoError(t, err)
		require.Len(t, b, 1+p.Len())
		got, n, err := Decode(b[1:])
		require.NoError(t, err, "%+v", p)
		require.Equal(t, p.Len(), n)
		require.Equal(t, p, got)
		// Trailing bytes are not read.
		_, n2, err := Decode(append(b[1:], 0xFF, 0xFF))
		require.NoError(t, err)
		require.Equal(t, n, n2)
	}
}

func TestEncodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		p    Packet
		want error
	}{
		{LinPDMA{Fence: true}, ErrUnsupported},
		{LinPDMA{Dir: 2}, ErrMalformed},
		{LinPDMA{WrComp: true, Fence: true, FenceAt: FenceData{ID: 4}}, ErrMalformed},
		{LinPDMA{WrComp: true, Fence: true, FenceAt: FenceData{Target: 1 << 14}}, ErrMalformed},
		{Fence{Wait: FenceData{Dec: 16}}, ErrMalformed},
		{Fence{ChID: 32}, ErrMalformed},
	} {
		b, err := tc.p.Append([]byte{1})
		require.ErrorIs(t, err, tc.want, "%+v", tc.p)
		require.Equal(t, []byte{1}, b, "a refused packet appends nothing")
	}
}

func TestDecodeRefuses(t *testing.T) {
	enc := func(p Packet) []byte { b, err := p.Append(nil); require.NoError(t, err); return b }
	set := func(b []byte, off int, bits uint32) []byte {
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint32(c[off:], binary.LittleEndian.Uint32(c[off:])|bits)
		return c
	}
	lin, wc := enc(LinPDMA{}), enc(LinPDMA{WrComp: true})
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"7 bytes", make([]byte, 7), ErrShort},
		{"opcode 0", make([]byte, 8), ErrMalformed},
		{"STOP", set(make([]byte, 8), 4, OpStop<<24), ErrMalformed},
		{"LIN_PDMA short", lin[:16], ErrShort},
		{"LIN_PDMA with wrcomp short", wc[:24], ErrShort},
		{"LIN_PDMA reserved ctl bit", set(lin, 4, 1<<14), ErrMalformed},
		{"LIN_PDMA top ctl bit", set(lin, 4, 1<<31), ErrMalformed},
		{"LIN_PDMA endian swap", set(lin, 4, LinEndianSwap.Mask()), ErrUnsupported},
		{"LIN_PDMA two completions", set(wc, 4, 2), ErrUnsupported},
		{"LIN_PDMA fence without completion", set(lin, 4, LinFenceEn.Mask()), ErrUnsupported},
		{"LIN_PDMA src/dst MSB from register", set(lin, 4, LinSrcDstMSBFromReg.Mask()), ErrUnsupported},
		{"LIN_PDMA fence data without fence_en", set(wc, 36, 1), ErrMalformed},
		{"LIN_PDMA fence reserved bits", set(set(wc, 4, LinFenceEn.Mask()), 36, 1<<4), ErrMalformed},
		{"MSG_LONG short", enc(MsgLong{})[:8], ErrShort},
		{"MSG_LONG op 2", set(enc(MsgLong{}), 4, 2<<20), ErrMalformed},
		{"MSG_LONG predicate", set(enc(MsgLong{}), 4, 1), ErrMalformed},
		{"FENCE reserved cfg bit", set(enc(Fence{}), 0, 1<<9), ErrMalformed},
		{"FENCE predicate", set(enc(Fence{}), 4, 3), ErrMalformed},
		{"NOP reserved bit", set(enc(NOP{}), 0, 2), ErrMalformed},
		{"NOP ctl bit", set(enc(NOP{}), 4, 1), ErrMalformed},
	} {
		p, n, err := Decode(tc.b)
		require.ErrorIs(t, err, tc.want, tc.name)
		require.Nil(t, p, tc.name)
		require.Zero(t, n, tc.name)
		require.False(t, errors.Is(err, ErrShort) && tc.want != ErrShort, tc.name)
	}
}

// FuzzDecode feeds arbitrary bytes to Decode: it must not panic, and what
// it accepts must encode back to exactly the bytes it consumed.
func FuzzDecode(f *testing.F) {
	for _, p := range []Packet{copyPacket(), LinPDMA{}, MsgLong{Value: 7}, Fence{ChID: 3}, NOP{}} {
		b, err := p.Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, n, err := Decode(b)
		if lp, ln, lin, lerr := DecodeLinPDMA(b); lin {
			// The unboxed form agrees with Decode.
			if (err == nil) != (lerr == nil) || err != nil && err.Error() != lerr.Error() || err == nil && (Packet(lp) != p || ln != n) {
				t.Fatalf("DecodeLinPDMA %+v, %d, %v; Decode %+v, %d, %v", lp, ln, lerr, p, n, err)
			}
		} else if _, isLin := p.(LinPDMA); isLin {
			t.Fatalf("Decode found a LIN_PDMA that DecodeLinPDMA did not: %+v", p)
		}
		if err != nil {
			if p != nil || n != 0 {
				t.Fatalf("error %v with packet %+v, %d bytes", err, p, n)
			}
			return
		}
		if n != p.Len() || n > len(b) || n%PIAlign != 0 {
			t.Fatalf("length %d for %+v from %d bytes", n, p, len(b))
		}
		enc, err := p.Append(nil)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", p, err)
		}
		if !bytes.Equal(enc, b[:n]) {
			t.Fatalf("round trip %x -> %+v -> %x", b[:n], p, enc)
		}
	})
}
