package hlsim

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gxfer/gxfer/internal/gaudi3"
)

// The Gaudi3 submission ring is memory the user writes and the model's
// channel worker parses (gaudi3.go execute): FuzzGaudi3Ring feeds it
// arbitrary bytes. Addresses in the input's LIN_PDMA packets below
// g3FuzzWin name the rig's host window, those at g3FuzzDRAM+x its DRAM
// window (the harness rewrites them to the rig's device VAs, which differ
// from run to run); any other address is used as it is.
const (
	g3FuzzWin  = 64 << 10
	g3FuzzDRAM = 1 << 32
	g3FuzzRing = 4096       // the channel's ring size (MSQ_SIZE+1)
	g3FuzzMax  = g3FuzzRing // ring bytes one input may post
)

// g3FuzzWindows is the rig's two windows and a model of their bytes.
type g3FuzzWindows struct {
	hostVA, dramVA uint64
	host, dram     []byte // the model
}

// reloc rewrites a fuzz address to a device VA.
func (w *g3FuzzWindows) reloc(a uint64) uint64 {
	switch {
	case a < g3FuzzWin:
		return w.hostVA + a
	case a-g3FuzzDRAM < g3FuzzWin:
		return w.dramVA + a - g3FuzzDRAM
	}
	return a
}

// span is the model's bytes for n bytes at fuzz address a; nil when the
// range is not inside one window (the outcome is then unknown).
func (w *g3FuzzWindows) span(a, n uint64) []byte {
	switch {
	case a < g3FuzzWin && n <= g3FuzzWin-a:
		return w.host[a : a+n]
	case a-g3FuzzDRAM < g3FuzzWin && n <= g3FuzzWin-(a-g3FuzzDRAM):
		return w.dram[a-g3FuzzDRAM : a-g3FuzzDRAM+n]
	}
	return nil
}

type g3Outcome int

const (
	g3Unknown g3Outcome = iota // an address outside the windows: any end but a hang
	g3Runs                     // every packet runs; incs counter advances
	g3Fails                    // a channel error: the device is reset, no counter advance
)

// g3FuzzModel relocates the input's packets (ring holds the bytes to
// post) and runs them on w's model: the outcome the emulator must show
// and, for g3Runs, the counter advances and packets it must count.
// The bytes go in the ring from offset start on, wrapping at its end: a
// packet that does not end before the ring's end is refused (RULES G8).
func g3FuzzModel(in []byte, start int, w *g3FuzzWindows) (ring []byte, out g3Outcome, incs, pkts uint64) {
	ring = bytes.Clone(in)
	out = g3Runs
	for off := 0; off < len(ring); {
		toEnd := g3FuzzRing - (start+off)%g3FuzzRing
		buf := ring[off:min(len(ring), off+gaudi3.LinPDMAWrCompSize, off+toEnd)]
		p, n, err := gaudi3.Decode(buf)
		if err != nil {
			return ring, worse(out, g3Fails), 0, 0
		}
		switch p := p.(type) {
		case gaudi3.NOP:
		case gaudi3.LinPDMA:
			if p.AdvanceCQ && !p.WrComp || p.Fence {
				return ring, worse(out, g3Fails), 0, 0
			}
			if out == g3Runs {
				out = g3LinModel(p, w)
			}
			if !p.Memset {
				p.Src = w.reloc(p.Src)
			}
			p.Dst = w.reloc(p.Dst)
			if p.WrComp {
				p.WrCompAddr = w.reloc(p.WrCompAddr)
			}
			enc, err := p.Append(nil)
			if err != nil || len(enc) != n {
				panic("a decoded LIN_PDMA does not encode back")
			}
			copy(ring[off:], enc)
			if p.AdvanceCQ {
				incs++
			}
		default: // decodes, but the channel runs only LIN_PDMA and NOP
			return ring, worse(out, g3Fails), 0, 0
		}
		pkts++
		off += n
	}
	return ring, out, incs, pkts
}

// worse: once unknown, a later failure does not make the outcome known
// (the unknown packet may fault first, or write over the ring).
func worse(cur, next g3Outcome) g3Outcome {
	if cur == g3Unknown {
		return g3Unknown
	}
	return next
}

// g3LinModel runs one LIN_PDMA (fuzz addresses) on the model.
func g3LinModel(p gaudi3.LinPDMA, w *g3FuzzWindows) g3Outcome {
	n := uint64(p.Size)
	dst := w.span(p.Dst, n)
	var src []byte
	if !p.Memset {
		src = w.span(p.Src, n)
	}
	var comp []byte
	if p.WrComp {
		comp = w.span(p.WrCompAddr, 4)
	}
	if n > 0 && (dst == nil || !p.Memset && src == nil) || p.WrComp && comp == nil {
		return g3Unknown
	}
	switch {
	case n == 0:
	case p.Memset:
		var v [8]byte
		binary.LittleEndian.PutUint64(v[:], p.Src)
		for i := range dst {
			dst[i] = v[i%8]
		}
	default:
		copy(dst, src) // memmove
	}
	if p.WrComp {
		binary.LittleEndian.PutUint32(comp, p.WrCompData)
	}
	return g3Runs
}

// FuzzGaudi3Ring posts arbitrary bytes to a Gaudi3 PDMA channel's ring
// and rings the doorbell (the first input byte puts them 8*(b%64) bytes
// before the ring's end, after NOPs that take the channel there). Whatever the bytes, nothing panics and the
// channel ends: it either runs every packet or stops with a channel
// error (the device reset, RULES G8). When every address is inside the
// windows the outcome is exact: a ring of LIN_PDMAs and NOPs runs to
// MSQ_PI with the windows' bytes as the model's, the completion counter
// advanced once per advcnt packet, no reset; any other ring resets the
// device with the counter untouched.
func FuzzGaudi3Ring(f *testing.F) {
	lin := func(p gaudi3.Packet) []byte {
		b, err := p.Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	const d = g3FuzzDRAM
	nopB := lin(gaudi3.NOP{EngBarrier: true})
	comp := gaudi3.LinPDMA{AdvanceCQ: true, WrComp: true, WrCompAddr: 60000, WrCompData: 7, IncContextID: true, DescCommit: true}
	withComp := func(p gaudi3.LinPDMA) gaudi3.LinPDMA {
		p.AdvanceCQ, p.WrComp, p.WrCompAddr, p.WrCompData, p.IncContextID, p.DescCommit = comp.AdvanceCQ, true, comp.WrCompAddr, comp.WrCompData, true, true
		return p
	}
	add := func(start byte, b ...[]byte) { f.Add(cat(append([][]byte{{start}}, b...)...)) }
	add(0, nopB)
	add(2, nopB, lin(withComp(gaudi3.LinPDMA{Src: 0, Dst: 64, Size: 64})), nopB)                                         // straddles the end
	add(5, lin(withComp(gaudi3.LinPDMA{Src: 0, Dst: 64, Size: 64})), nopB, lin(gaudi3.LinPDMA{Src: 8, Dst: d, Size: 8})) // wraps
	add(0, cat(lin(withComp(gaudi3.LinPDMA{Src: 0, Dst: d, Size: 4096, Dir: gaudi3.DirHostToDevice})),
		lin(withComp(gaudi3.LinPDMA{Src: d, Dst: 8192, Size: 4096, Dir: gaudi3.DirDeviceToHost}))))
	add(0, cat(lin(gaudi3.LinPDMA{Src: 100, Dst: 50, Size: 1000}), lin(gaudi3.LinPDMA{Src: 0x0123456789abcdef, Dst: d + 3, Size: 333, Memset: true}), nopB))
	add(0, lin(gaudi3.LinPDMA{Src: 0, Dst: d, Size: 4096, AdvanceCQ: true}))
	add(0, nopB, lin(withComp(gaudi3.LinPDMA{Src: 0, Dst: g3FuzzWin - 8, Size: 16})))
	add(0, nopB, lin(withComp(gaudi3.LinPDMA{Src: 0, Dst: d, Size: 64}))[:30])
	add(0, lin(gaudi3.MsgLong{Value: 1, Addr: 60000}))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 {
			return
		}
		start := (g3FuzzRing - 8*int(in[0]%64)) % g3FuzzRing
		in = in[1:min(len(in), 1+g3FuzzMax)]
		r := newG3Rig(t, Config{DRAMSize: 64 << 20}, 1)
		r.w(gaudi3.RegMSQSize, g3FuzzRing-1)
		if start > 0 {
			var nops []byte
			for len(nops) < start {
				nops, _ = gaudi3.NOP{}.Append(nops)
			}
			r.post(nops)
			for end := time.Now().Add(safety); r.rd(gaudi3.RegMSQCI) != r.pi; time.Sleep(50 * time.Microsecond) {
				if time.Now().After(end) {
					t.Fatalf("the channel did not run %d bytes of NOPs", start)
				}
			}
		}
		w := &g3FuzzWindows{host: pattern(g3FuzzWin, 5), dram: pattern(g3FuzzWin, 9)}
		var hostMem []byte
		hostMem, w.hostVA = r.host(g3FuzzWin)
		copy(hostMem, w.host)
		w.dramVA = r.dram(g3FuzzWin)
		r.dramAccess(t, w.dramVA, w.dram, true)
		ring, want, incs, pkts := g3FuzzModel(in, start, w)
		pkts += uint64(start / gaudi3.NOPSize)

		for i, b := range ring {
			r.ring[(start+i)%g3FuzzRing] = b
		}
		r.pi += uint32(len(ring))
		r.w(gaudi3.RegMSQPI, r.pi)
		r.b.(*hctx).Doorbell(r.regs)
		deadline := time.Now().Add(safety)
		for {
			st := r.d.Stats()
			if st.Resets > 0 {
				if want == g3Runs {
					t.Fatalf("the device was reset; the model runs every packet (%d)", pkts)
				}
				if c := r.counter(); c != 0 {
					t.Fatalf("counter %d after a channel error", c)
				}
				return
			}
			if r.rd(gaudi3.RegMSQCI) == r.pi && r.counter() == incs {
				if want == g3Fails {
					// The device may still be on its way to the reset.
					if time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
						continue
					}
					t.Fatalf("the ring ran to its end; the model fails it")
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the channel did not end: MSQ_CI %d of %d, counter %d (model: outcome %d, %d advances)",
					r.rd(gaudi3.RegMSQCI), r.pi, r.counter(), want, incs)
			}
			time.Sleep(50 * time.Microsecond)
		}
		if want != g3Runs {
			return
		}
		if st := r.d.Stats(); st.PacketsExecuted != pkts || st.Resets != 0 {
			t.Fatalf("%d packets executed, %d resets; the model runs %d", st.PacketsExecuted, st.Resets, pkts)
		}
		if !bytes.Equal(hostMem, w.host) {
			t.Fatalf("host window differs from the model at byte %d", firstDiff(hostMem, w.host))
		}
		got := make([]byte, g3FuzzWin)
		r.dramAccess(t, w.dramVA, got, false)
		if !bytes.Equal(got, w.dram) {
			t.Fatalf("DRAM window differs from the model at byte %d", firstDiff(got, w.dram))
		}
	})
}

// dramAccess writes b to (or reads it from) device memory at va, as the
// test's own view of the context's MMU.
func (r *g3rig) dramAccess(t *testing.T, va uint64, b []byte, write bool) {
	c := r.b.(*hctx)
	c.memMu.RLock()
	defer c.memMu.RUnlock()
	segs, err := c.translate(nil, va, uint64(len(b)))
	if err == nil {
		if write {
			err = scatterAt(segs, 0, b)
		} else {
			err = gatherAt(segs, 0, b)
		}
	}
	if err != nil {
		t.Fatalf("DRAM window: %v", err)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
