package hlsim

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// fuzzCBSize bounds the fuzzed CB (and so the work one input can ask for).
const fuzzCBSize = 1024

// fuzzRig is a device with fixed memory for the fuzzer: a persistent CB,
// host buffers and DRAM.
type fuzzRig struct {
	*rig
	cb       []byte // CB memory (kernel CB mmap on Gaudi1, USERPTR host page on Gaudi2)
	cbHandle uint64 // kernel CB handle (Gaudi1) or device VA (Gaudi2)
	src, dst uint64 // device VAs of two 64 KiB host buffers
	dram     uint64
}

func newFuzzRig(f *testing.F, m Model) *fuzzRig {
	r := newRig(f, Config{Model: m, DRAMSize: 16 << 20})
	fr := &fuzzRig{rig: r}
	if r.g1 {
		h, err := hlsys.CBCreate(r.b, fuzzCBSize, 0)
		if err != nil {
			f.Fatal(err)
		}
		if fr.cb, err = r.b.Mmap(int64(h), 4096); err != nil {
			f.Fatal(err)
		}
		fr.cbHandle = h
	} else {
		fr.cb, fr.cbHandle = r.host(4096)
	}
	var src []byte
	src, fr.src = r.host(65536)
	copy(src, pattern(65536, 1))
	_, fr.dst = r.host(65536)
	fr.dram = r.dram(2 << 20)
	return fr
}

func (fr *fuzzRig) chunk(n int) hlsys.CSChunk {
	c := hlsys.CSChunk{CBHandle: fr.cbHandle, CBSize: uint32(n)}
	if !fr.g1 {
		c.Flags = hlsys.CSChunkFlagsUserAllocCB
	}
	return c
}

// FuzzExecuteCB feeds arbitrary CB bytes through submit and wait: the
// emulator must not panic, and every CS must end COMPLETED (rc 0) or
// ABORTED (-EIO), or be refused by the Gaudi1 parser (EINVAL/EPERM). The
// first input byte picks the model.
func FuzzExecuteCB(f *testing.F) {
	rigs := [2]*fuzzRig{newFuzzRig(f, ModelGaudi1), newFuzzRig(f, ModelGaudi2)}
	for i, fr := range rigs {
		g1 := fr.g1
		sel := []byte{byte(i)}
		f.Add(cat(sel, nop()))
		f.Add(cat(sel, linDMA(g1, fr.dram, fr.src, 4096), linDMA(g1, fr.dst, fr.dram, 4096), nop()))
		f.Add(cat(sel, memsetPkt(g1, fr.dst+3, 0x0123456789abcdef, 1000)))
		f.Add(cat(sel, linDMA(g1, fr.dst+1, fr.dst, 60000)))
		f.Add(cat(sel, linDMA(g1, fr.r().info.SramBaseAddress, fr.src, 65536)))
		f.Add(cat(sel, linDMA(g1, fr.dst, fr.src, 70000)))
		f.Add(cat(sel, linDMA(g1, fr.dst, fr.src, 16)[:16]))
		f.Add(cat(sel, pkt8(0x1F<<24)))
		f.Add(cat(sel, pkt8(ctlMsgProt), pkt8(0)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		fr := rigs[data[0]&1]
		cb := data[1:]
		cb = cb[:min(len(cb), fuzzCBSize)&^7]
		if len(cb) == 0 {
			return
		}
		copy(fr.cb, cb)
		out, err := hlsys.SubmitCS(fr.b, nil, []hlsys.CSChunk{fr.chunk(len(cb))}, 0, 0)
		if err != nil {
			if fr.g1 && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM)) {
				return // refused by the parser
			}
			t.Fatalf("submit: %v", err)
		}
		w, err := hlsys.WaitForCS(fr.b, out.Seq, uint64(safety.Microseconds()))
		switch {
		case err == nil && w.Status == hlsys.WaitCSStatusCompleted:
		case errors.Is(err, unix.EIO) && w.Status == hlsys.WaitCSStatusAborted:
		default:
			t.Fatalf("wait: status %d, err %v", w.Status, err)
		}
	})
}

func (fr *fuzzRig) r() *rig { return fr.rig }

// FuzzParseMapsRange: the /proc/self/smaps head parser never panics and
// only reports ranges it read in full.
func FuzzParseMapsRange(f *testing.F) {
	for _, s := range []string{
		"7f0000000000-7f0000200000 rw-p 00000000 00:00 0",
		"Size:               2048 kB",
		"VmFlags: rd wr mr mw me ac sd",
		"-1 x", "1- x", "zz-1 x", "", "-",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		lo, hi, ok := parseMapsRange(line)
		if !ok && (lo != 0 || hi != 0) {
			t.Fatalf("%q: partial result %x-%x", line, lo, hi)
		}
	})
}
