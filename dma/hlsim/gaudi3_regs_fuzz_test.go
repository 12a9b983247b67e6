package hlsim

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// FuzzGaudi3Regs writes arbitrary values to a Gaudi3 PDMA channel's CH_A
// block, the user's only interface to the channel (the driver never sees
// these stores): the channel, set up as dma programs it, takes each
// 7-byte record (kind, offset u16, value u32) as
//
//	kind&3 0: a register store at offset (4-byte aligned, in the block)
//	kind&3 1: a 32-bit store into the ring at offset
//	kind&3 2: MSQ_PI advanced by value%4096 (8-byte multiple)
//	kind&3 3: the Doorbell hint alone
//
// with the Doorbell after stores when kind&4. Whatever the stores, the
// model must not panic or hang, the waits on the channel's interrupt end
// within their timeout, and once the context is released the device is
// operational again, nothing is left mapped and a new context works
// (fuzzAfter). Addresses the registers take (ring, counter, completion
// writes) are device VAs: the MMU refuses what is not mapped.
func FuzzGaudi3Regs(f *testing.F) {
	rec := func(kind byte, off uint16, v uint32) []byte {
		b := make([]byte, 7)
		b[0] = kind
		binary.LittleEndian.PutUint16(b[1:], off)
		binary.LittleEndian.PutUint32(b[3:], v)
		return b
	}
	// dma's program (dma/gaudi3.go): stop, ring in MSQ mode, indices 0,
	// the counter, the interrupt message, start; then work and a stop.
	program := cat(
		rec(4, gaudi3.RegCQReconfig, gaudi3.CQReconfigEn.Put(0, 1)),
		rec(0, gaudi3.RegDescSubmitFifoCfg, gaudi3.FifoCfgMSQ),
		rec(0, gaudi3.RegMSQPI, 0), rec(0, gaudi3.RegMSQCI, 0),
		rec(0, gaudi3.RegECQBaseSize, gaudi3.ECQCounterSize),
		rec(0, gaudi3.RegECQChCfg, 0b111),
		rec(4, gaudi3.RegCQReconfig, 0),
	)
	nopPkt, err := gaudi3.NOP{EngBarrier: true}.Append(nil)
	require.NoError(f, err)
	var ringNOPs []byte
	for i := 0; i < len(nopPkt); i += 4 {
		ringNOPs = append(ringNOPs, rec(1, uint16(i), binary.LittleEndian.Uint32(nopPkt[i:]))...)
	}
	f.Add(cat(ringNOPs, rec(6, 0, uint32(len(nopPkt)))))
	f.Add(cat(program, ringNOPs, rec(6, 0, uint32(len(nopPkt))), rec(3, 0, 0)))
	f.Add(cat(rec(6, 0, 64), rec(4, gaudi3.RegCQReconfig, 1), rec(6, 0, 64)))
	f.Add(cat(rec(0, gaudi3.RegMSQSize, 100), rec(6, 0, 16)))
	f.Add(cat(rec(0, gaudi3.RegMSQBaseLo, 0), rec(0, gaudi3.RegMSQBaseHi, 0), rec(6, 0, 8)))
	f.Add(cat(rec(0, gaudi3.RegECQBaseLo, 0xFFFFFFF8), rec(0, gaudi3.RegECQLBWPayload, 0xFFFFFFFF), ringNOPs, rec(6, 0, 8)))
	f.Add(cat(rec(4, gaudi3.RegMSQPI, 0xFFFFFFF8), rec(4, gaudi3.RegMSQCI, 0xFFFFFFF0)))
	f.Add(cat(rec(4, gaudi3.RegDescSubmitFifoCfg, 0), rec(4, gaudi3.RegDescSubmitFifoCfg, gaudi3.FifoCfgMSQ), rec(6, 0, 24)))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 7*256 {
			return
		}
		// A hang is reported before the fuzzing worker's limit (watchHang).
		hang := watchHang(t, "FuzzGaudi3Regs", in)
		defer hang.stop()
		r := newG3Rig(t, Config{DRAMSize: 64 << 20}, 1)
		hang.setUnblock(func() { _ = r.d.Close() })
		r.hangBy = hang.deadline
		// Most inputs end in a channel error and its hard reset; the
		// kill's grace second (killGrace) would bound the target to a
		// few inputs a second, and its length is not what it checks.
		r.d.testGrace = 20 * time.Millisecond
		for ; len(in) >= 7; in = in[7:] {
			kind, off, v := in[0], binary.LittleEndian.Uint16(in[1:]), binary.LittleEndian.Uint32(in[3:])
			switch kind & 3 {
			case 0:
				r.w(int(off)%gaudi3.ChASize&^3, v)
			case 1:
				atomicStore32(r.ring[int(off)%g3TestRing&^3:], v)
			case 2:
				r.pi += v % 4096 &^ 7
				r.w(gaudi3.RegMSQPI, r.pi)
			}
			if kind&3 == 3 || kind&4 != 0 {
				r.b.(*hctx).Doorbell(r.regs)
			}
		}
		// A wait on the channel's interrupt ends (completed, timed out
		// or aborted by a reset) within its timeout.
		_, err := hlsys.WaitForInterruptKernelCQ(r.b, r.cqH, 0, 1<<62, g3FirstUserInterrupt, 1000)
		var e unix.Errno
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("interrupt wait: %T %v is no errno", err, err)
		}
		fuzzAfter(t, r.rig)
	})
}
