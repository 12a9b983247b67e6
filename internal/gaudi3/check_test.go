package gaudi3

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkNumbers returns one line per number whose gxfer value differs from
// the transcribed one.
func checkNumbers(ns []number) []string {
	var bad []string
	for _, n := range ns {
		if got := n.got(); got != n.want {
			bad = append(bad, fmt.Sprintf("%s: gxfer %#x, transcribed %#x (%s)", n.name, got, n.want, n.src))
		}
	}
	return bad
}

// checkBits returns one line per field whose position or width differs.
func checkBits(bs []bits) []string {
	var bad []string
	for _, b := range bs {
		if b.got.Shift() != b.shift || b.got.Width() != b.width {
			bad = append(bad, fmt.Sprintf("%s: gxfer %v, transcribed [%d:%d] (%s)", b.name, b.got,
				b.shift+b.width-1, b.shift, b.src))
		}
	}
	return bad
}

// diffDwords encodes p's two forms and returns, per dword offset, the bits
// that differ.
func diffDwords(f pktField) (map[int]uint32, error) {
	base, err := f.set(false).Append(nil)
	if err != nil {
		return nil, err
	}
	top, err := f.set(true).Append(nil)
	if err != nil {
		return nil, err
	}
	n := max(len(base), len(top))
	pad := func(b []byte) []byte { return append(b, make([]byte, n-len(b))...) }
	base, top = pad(base), pad(top)
	d := map[int]uint32{}
	for off := 0; off < n; off += 4 {
		if x := binary.LittleEndian.Uint32(base[off:]) ^ binary.LittleEndian.Uint32(top[off:]); x != 0 {
			d[off] = x
		}
	}
	return d, nil
}

// checkPacketFields encodes every field at zero and at its maximum and
// requires the difference to be exactly the transcribed bits of the
// transcribed dword; the maximal packet must also decode to itself.
func checkPacketFields(fs []pktField) []string {
	var bad []string
	for _, f := range fs {
		want64 := (uint64(1)<<f.width - 1) << f.shift
		if f.width == 0 || want64 > 0xFFFFFFFF {
			bad = append(bad, fmt.Sprintf("%s: transcribed bits [%d+%d] leave the dword (%s)", f.name, f.shift, f.width, f.src))
			continue
		}
		want := uint32(want64)
		d, err := diffDwords(f)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: encode: %v", f.name, err))
			continue
		}
		if len(d) != 1 || d[f.dword] != want {
			bad = append(bad, fmt.Sprintf("%s: encoder changes %s, transcribed dword %d bits %#08x (%s)",
				f.name, fmtDiff(d), f.dword, want, f.src))
		}
		enc, _ := f.set(true).Append(nil)
		p, n, err := Decode(enc)
		if err != nil || n != len(enc) || p != f.set(true) {
			bad = append(bad, fmt.Sprintf("%s: decode of the maximal packet: %v, %d bytes, %+v", f.name, err, n, p))
		}
	}
	return bad
}

func fmtDiff(d map[int]uint32) string {
	var s []string
	for off := 0; off <= LinPDMAWrCompSize; off += 4 {
		if x, ok := d[off]; ok {
			s = append(s, fmt.Sprintf("dword %d bits %#08x", off, x))
		}
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func TestTranscribedNumbers(t *testing.T) {
	ns := numbers()
	require.Greater(t, len(ns), 60)
	require.Empty(t, checkNumbers(ns))
}

func TestTranscribedFields(t *testing.T) {
	require.Empty(t, checkBits(regFields()))
	require.Empty(t, checkPacketFields(packetFields()))
}

// TestRegistersTileTheBlock: every register gxfer names lies inside the
// 4 KiB block, on a 4-byte boundary, and no two overlap.
func TestRegistersTileTheBlock(t *testing.T) {
	regs := map[uint64]string{}
	for _, n := range numbers() {
		if !strings.HasPrefix(n.src, "CHA ") && !strings.HasPrefix(n.src, "PQMA ") || n.name == "CH_A size" || n.name == "fence count" {
			continue
		}
		off := n.got()
		require.Less(t, off, uint64(ChASize), n.name)
		require.Zero(t, off%4, n.name)
		require.NotContains(t, regs, off, "%s overlaps %s", n.name, regs[off])
		regs[off] = n.name
	}
	require.Len(t, regs, 21)
}

// TestFieldsOfARegisterDoNotOverlap checks the fields that share a word.
func TestFieldsOfARegisterDoNotOverlap(t *testing.T) {
	for _, group := range [][]Field{
		{FifoCfgMode, FifoCfgWriteMode},
		{ECQEnable, ECQComplMode, ECQLBWWrEn},
		{SOBVal, SOBLong, SOBZeroCnt, SOBInc},
		{FenceDec, FenceChID, FenceTarget, FenceID},
		{LinWrComp, LinEndianSwap, LinMemset, LinFenceEn, LinWrCompHiFromReg, LinConsecutiveComp12,
			LinIncContextID, LinAddOffset0, LinSrcDstMSBFromReg, LinEnDescCommit, LinAdvanceCQ, LinDirection,
			CtlOpcode, CtlEngBarrier},
		{CtlPred, MsgLongOp, CtlOpcode, CtlEngBarrier},
	} {
		var seen uint32
		for _, f := range group {
			require.Zerof(t, seen&f.Mask(), "%v overlaps", f)
			seen |= f.Mask()
		}
	}
}

// mutations returns copies of the tables with one transcribed number
// altered, named by the entry they alter.
func mutations() map[string]func() []string {
	m := map[string]func() []string{}
	for i, n := range numbers() {
		m["number "+n.name] = func() []string {
			ns := numbers()
			ns[i].want += 4
			return checkNumbers(ns)
		}
	}
	for i, b := range regFields() {
		m["shift of "+b.name] = func() []string {
			bs := regFields()
			bs[i].shift = nudge(bs[i].shift, bs[i].width)
			return checkBits(bs)
		}
		m["width of "+b.name] = func() []string {
			bs := regFields()
			bs[i].width = widen(bs[i].shift, bs[i].width)
			return checkBits(bs)
		}
	}
	for i, f := range packetFields() {
		m["dword of "+f.name] = func() []string {
			fs := packetFields()
			fs[i].dword += 4
			return checkPacketFields(fs)
		}
		m["shift of "+f.name] = func() []string {
			fs := packetFields()
			fs[i].shift = nudge(fs[i].shift, fs[i].width)
			return checkPacketFields(fs)
		}
		m["width of "+f.name] = func() []string {
			fs := packetFields()
			fs[i].width = widen(fs[i].shift, fs[i].width)
			return checkPacketFields(fs)
		}
	}
	return m
}

// nudge moves a field by one bit, staying inside the dword.
func nudge(shift, width uint) uint {
	if shift+width < 32 || shift == 0 {
		return shift + 1 // for a 32-bit field: out of the dword
	}
	return shift - 1
}

// widen changes a field's width by one, staying inside the dword.
func widen(shift, width uint) uint {
	if shift+width < 32 {
		return width + 1
	}
	return width - 1
}

// TestMutationsAreCaught alters every transcribed number, bit position and
// width, one at a time, and requires the checks to report the altered
// entry: no transcribed number goes unchecked.
func TestMutationsAreCaught(t *testing.T) {
	ms := mutations()
	require.Greater(t, len(ms), 150)
	for name, run := range ms {
		entry := name[strings.Index(name, " of ")+len(" of "):]
		if strings.HasPrefix(name, "number ") {
			entry = strings.TrimPrefix(name, "number ")
		}
		bad := run()
		found := false
		for _, b := range bad {
			if strings.HasPrefix(b, entry+":") {
				found = true
			}
		}
		require.Truef(t, found, "%s: not caught; mismatches %q", name, bad)
	}
}
