package hlsim

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestCSValidationGaudi2 covers the CS rules of the Gaudi2 driver (RULES.md
// "CS" rows): errors before allocate_cs leave the sequence number alone,
// errors from the per-chunk validation consume one.
func TestCSValidationGaudi2(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2})
	good := r.chunk(0, nop())
	hostPtr := hostMem(t, 4096)
	with := func(f func(*hlsys.CSChunk)) []hlsys.CSChunk {
		c := good
		f(&c)
		return []hlsys.CSChunk{c}
	}
	cases := []struct {
		name     string
		chunks   []hlsys.CSChunk
		flags    uint32
		errno    unix.Errno
		consumes bool // the refused CS used up a sequence number
	}{
		{"no chunks", nil, 0, unix.EINVAL, false},
		{"513 chunks", make([]hlsys.CSChunk, 513), 0, unix.EINVAL, false},
		{"signal CS", []hlsys.CSChunk{good}, hlsys.CSFlagsSignal, unix.EOPNOTSUPP, false},
		{"signal|wait", []hlsys.CSChunk{good}, hlsys.CSFlagsSignal | hlsys.CSFlagsWait, unix.EINVAL, false},
		{"staged", []hlsys.CSChunk{good}, 0x40, unix.EPERM, false},
		{"queue 261 (>= max_queues)", with(func(c *hlsys.CSChunk) { c.QueueIndex = 261 }), 0, unix.EINVAL, true},
		{"queue 260 (CPU_PQ)", with(func(c *hlsys.CSChunk) { c.QueueIndex = hlsys.Gaudi2QueueCPUPQ }), 0, unix.EINVAL, true},
		{"no USER_ALLOC_CB", with(func(c *hlsys.CSChunk) { c.Flags = 0 }), 0, unix.EINVAL, true},
		{"queue 2 (disabled)", with(func(c *hlsys.CSChunk) { c.QueueIndex = 2 }), 0, unix.EINVAL, true},
		{"queue 7 (disabled)", with(func(c *hlsys.CSChunk) { c.QueueIndex = 7 }), 0, unix.EINVAL, true},
		{"kernel CB handle", with(func(c *hlsys.CSChunk) { c.CBHandle = hlsys.MmapTypeCB<<12 | 1<<12 }), 0, unix.EFAULT, true},
		{"raw host pointer", with(func(c *hlsys.CSChunk) { c.CBHandle = addrOf(hostPtr) }), 0, unix.EFAULT, true},
		{"cb size 0", with(func(c *hlsys.CSChunk) { c.CBSize = 0 }), 0, unix.EFAULT, true},
		{"MME queue 16 (not emulated)", with(func(c *hlsys.CSChunk) { c.QueueIndex = 16 }), 0, unix.EOPNOTSUPP, false},
	}
	consumed := uint64(0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := hlsys.CSArgs{}
			if len(tc.chunks) > 0 {
				arr := outBuf(t, len(tc.chunks)*int(unsafe.Sizeof(tc.chunks[0])))
				copy(arr, unsafe.Slice((*byte)(unsafe.Pointer(&tc.chunks[0])), len(arr)))
				a.In.ChunksExecute = addrOf(arr)
			}
			a.In.NumChunksExecute = uint32(len(tc.chunks))
			a.In.CSFlags = tc.flags
			err := hlsys.CommandSubmission(r.b, &a)
			isErrno(t, err, tc.errno)
			// hl_cs_ioctl's output on failure: seq ULLONG_MAX, status -errno.
			require.Equal(t, hlsys.CSOut{Seq: ^uint64(0), Status: uint32(-int32(tc.errno))}, *a.Out())
		})
		if tc.consumes {
			consumed++
		}
	}
	t.Run("restore chunks with FORCE_RESTORE", func(t *testing.T) {
		_, err := hlsys.SubmitCS(r.b, []hlsys.CSChunk{good}, []hlsys.CSChunk{good}, hlsys.CSFlagsForceRestore, 0)
		isErrno(t, err, unix.EOPNOTSUPP)
	})
	t.Run("bad chunk pointer", func(t *testing.T) {
		for _, p := range []uint64{0x1000, 0x10} {
			a := hlsys.CSArgs{In: hlsys.CSIn{ChunksExecute: p, NumChunksExecute: 1}}
			require.ErrorIs(t, hlsys.CommandSubmission(r.b, &a), unix.EFAULT, "chunks at %#x", p)
		}
	})
	t.Run("pad", func(t *testing.T) {
		a := hlsys.CSArgs{In: hlsys.CSIn{ChunksExecute: addrOf(hostPtr), NumChunksExecute: 1, Pad: 1}}
		require.ErrorIs(t, hlsys.CommandSubmission(r.b, &a), unix.EINVAL)
	})
	out, err := hlsys.SubmitCS(r.b, nil, []hlsys.CSChunk{good}, 0, 0)
	require.NoError(t, err)
	require.Equal(t, 1+consumed, out.Seq, "each refusal after allocate_cs used a sequence number")
	require.Equal(t, uint32(hlsys.CSStatusSuccess), out.Status)
	// The fence of a refused CS completes at once: WAIT_CS reports it
	// COMPLETED (its -EBUSY error is neither -ETIMEDOUT nor -EIO).
	w, err := hlsys.WaitForCS(r.b, out.Seq-1, 0)
	require.NoError(t, err)
	require.Equal(t, hlsys.WaitCSOut{Status: hlsys.WaitCSStatusCompleted}, w)

	// The driver does not check a user CB's size beyond the address
	// range: 12 bytes are accepted and fail when the QMAN meets the
	// truncated packet (the emulator's choice; RULES.md), a CB larger
	// than HL_MAX_CB_SIZE is accepted and runs when its bytes are mapped.
	seq, err := r.submit(0, 0, with(func(c *hlsys.CSChunk) { c.CBSize = 12 })...)
	require.NoError(t, err)
	_, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	isErrno(t, err, unix.EIO)
	big := hostMem(t, 4<<20)
	for i := 0; i+8 <= len(big); i += 8 {
		copy(big[i:], nop())
	}
	bva, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&big[0]), uint64(len(big)), 0, 0)
	require.NoError(t, err)
	seq, err = r.submit(0, 0, hlsys.CSChunk{CBHandle: bva, CBSize: hlsys.MaxCBSize + 8, Flags: hlsys.CSChunkFlagsUserAllocCB})
	require.NoError(t, err)
	w, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), w.Status)
}

// TestCSValidationGaudi1 covers the Gaudi1 CS rules: external queues take
// kernel CB handles whatever the chunk flags say, internal queues a device
// address; the parser's refusals.
func TestCSValidationGaudi1(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi1})
	good := r.chunk(0, nop())
	with := func(f func(*hlsys.CSChunk)) []hlsys.CSChunk {
		c := good
		f(&c)
		return []hlsys.CSChunk{c}
	}
	_, hva := r.host(4096)
	internalCB := hlsys.CSChunk{CBHandle: hva, QueueIndex: 9, CBSize: 8}
	cases := []struct {
		name   string
		chunks []hlsys.CSChunk
		errno  unix.Errno
	}{
		{"queue 113 (>= max_queues)", with(func(c *hlsys.CSChunk) { c.QueueIndex = 113 }), unix.EINVAL},
		{"queue 8 (CPU_PQ)", with(func(c *hlsys.CSChunk) { c.QueueIndex = hlsys.Gaudi1QueueCPUPQ }), unix.EINVAL},
		{"internal queue, CB handle as address", with(func(c *hlsys.CSChunk) { c.QueueIndex = 9 }), unix.EFAULT},
		{"internal queues only", []hlsys.CSChunk{internalCB}, unix.EINVAL},
		{"internal queue with an external one (not emulated)", []hlsys.CSChunk{good, internalCB}, unix.EOPNOTSUPP},
		{"no such CB", with(func(c *hlsys.CSChunk) { c.CBHandle += 100 << 12 }), unix.EINVAL},
		{"id 3 (no such CB, no type bits)", with(func(c *hlsys.CSChunk) { c.CBHandle = 0x3000 }), unix.EINVAL},
		{"cb size > CB", with(func(c *hlsys.CSChunk) { c.CBSize = 4096 + 8 }), unix.EINVAL},
		{"cb size 4", with(func(c *hlsys.CSChunk) { c.CBSize = 4 }), unix.EINVAL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := hlsys.SubmitCS(r.b, nil, tc.chunks, 0, 0)
			isErrno(t, err, tc.errno)
		})
	}
	// The CB lookup (hl_mmap_mem_buf_get) takes the low 32 bits of
	// handle >> PAGE_SHIFT: without the mmap type bits, or with in-page
	// bits, the handle still names the CB.
	for _, h := range []uint64{good.CBHandle &^ (hlsys.MmapTypeCB << 12), good.CBHandle | 0x123} {
		seq, err := r.submit(0, 0, with(func(c *hlsys.CSChunk) { c.CBHandle = h })...)
		require.NoError(t, err, "handle %#x", h)
		_, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
		require.NoError(t, err)
	}
	_, err := r.b.Mmap(int64(good.CBHandle&^(hlsys.MmapTypeCB<<12)), 4096)
	require.ErrorIs(t, err, unix.EINVAL, "mmap dispatches on the type bits")
	// USER_ALLOC_CB is "don't care" on an external queue: the handle is
	// still a kernel CB.
	seq, err := r.submit(0, 0, with(func(c *hlsys.CSChunk) { c.Flags = hlsys.CSChunkFlagsUserAllocCB })...)
	require.NoError(t, err)
	_, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	require.NoError(t, err)

	// The parser runs at submission.
	dram := r.dram(4096)
	parser := []struct {
		name  string
		cb    []byte
		errno unix.Errno
	}{
		{"MSG_PROT", cat(nop(), pkt8(ctlMsgProt), pkt8(0)), unix.EPERM},
		{"CP_DMA", cat(pkt8(ctlCPDMA), pkt8(0)), unix.EPERM},
		{"STOP", pkt8(ctlStop), unix.EPERM},
		{"WREG_BULK", pkt8(0x2 << 24), unix.EPERM},
		{"LOAD_AND_EXE dst=1", cat(append([]byte{1, 0, 0, 0}, pkt8(0xF << 24)[4:]...), pkt8(0)), unix.EPERM},
		{"unknown opcode", pkt8(0x1F << 24), unix.EINVAL},
		{"opcode 0", make([]byte, 8), unix.EINVAL},
		{"truncated LIN_DMA", linDMA(true, dram, hva, 64)[:16], unix.EINVAL},
	}
	for _, tc := range parser {
		t.Run(tc.name, func(t *testing.T) {
			_, err := hlsys.SubmitCS(r.b, nil, []hlsys.CSChunk{r.chunk(0, tc.cb)}, 0, 0)
			isErrno(t, err, tc.errno)
		})
	}
	// WREG_32 passes the parser but is not emulated: the CS fails.
	out, err := r.run(pkt8(ctlWReg32 | ctlRB))
	isErrno(t, err, unix.EIO)
	require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
}

// TestGaudi1ParserCopies: a Gaudi1 CB is parsed and copied at submission,
// so changing it afterwards does not change the CS.
func TestGaudi1ParserCopies(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi1})
	src, sva := r.host(4096)
	dst, dva := r.host(4096)
	copy(src, pattern(4096, 4))
	h, err := hlsys.CBCreate(r.b, 4096, 0)
	require.NoError(t, err)
	mm, err := r.b.Mmap(int64(h), 4096)
	require.NoError(t, err)
	copy(mm, linDMA(true, dva, sva, 4096))
	r.d.DelayNextCS(1, 10*time.Millisecond)
	seq, err := r.submit(0, 0, hlsys.CSChunk{CBHandle: h, CBSize: 24})
	require.NoError(t, err)
	copy(mm, linDMA(true, dva, sva, 1)) // too late
	_, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	require.NoError(t, err)
	require.Equal(t, pattern(4096, 4), dst)
}

func TestDMA(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m, DRAMSize: 256 << 20})
			g1 := r.g1
			const n = 3<<20 + 123 // spans bounce chunks and pages
			src, sva := r.host(n + 4096)
			dst, dva := r.host(n + 4096)
			copy(src, pattern(n, 1))
			d1, d2 := r.dram(n), r.dram(n)

			// host -> DRAM -> DRAM -> host in one CB, then host -> host.
			r.mustRun(cat(linDMA(g1, d1, sva, n), linDMA(g1, d2, d1, n), linDMA(g1, dva, d2, n), nop()))
			require.Equal(t, pattern(n, 1), dst[:n])
			clear(dst)
			r.mustRun(linDMA(g1, dva+5, sva, n))
			require.Equal(t, pattern(n, 1), dst[5:n+5])
			require.Zero(t, dst[4])
			clear(dst)

			// memset with a pattern phase relative to the transfer start,
			// odd length, host and DRAM targets.
			r.mustRun(memsetPkt(g1, dva+1, 0x1122334455667788, 13))
			require.Equal(t, []byte{0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x88, 0x77, 0x66, 0x55, 0x44, 0}, dst[:15])
			r.mustRun(cat(memsetPkt(g1, d1, 0xA5A5A5A5A5A5A5A5, n), linDMA(g1, dva, d1, n)))
			require.Equal(t, bytes.Repeat([]byte{0xA5}, n), dst[:n])

			// SRAM is reachable by physical address.
			sram := r.info.SramBaseAddress
			r.mustRun(cat(linDMA(g1, sram+8, sva, 4096), linDMA(g1, dva, sram+8, 4096)))
			require.Equal(t, pattern(4096, 1), dst[:4096])

			// tsize 0 is a no-op.
			r.mustRun(linDMA(g1, 0xdead, 0xbeef, 0))

			st := r.d.Stats()
			require.GreaterOrEqual(t, st.BytesMoved, uint64(5*n))
			require.NotZero(t, st.PacketsExecuted)
			require.NotZero(t, st.DMABusy)
		})
	}
}

// TestDMAOverlap checks memmove semantics in both directions, for host
// memory and DRAM.
func TestDMAOverlap(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m, DRAMSize: 64 << 20})
			g1 := r.g1
			// n exceeds the engine's 1 MiB bounce buffer: staged in chunks.
			const total, base, n = 3 << 20, 1 << 20, 1<<20 + 77
			buf, va := r.host(total)
			dram := r.dram(total)
			init := pattern(total, 3)
			for _, shift := range []int{1, 4096, 1 << 19, -1, -4096, -(1 << 19)} {
				for _, onDevice := range []bool{false, true} {
					copy(buf, init)
					want := append([]byte(nil), buf...)
					copy(want[base+shift:], want[base:base+n]) // Go's copy is a memmove
					if onDevice {
						r.mustRun(linDMA(g1, dram, va, total))
						r.mustRun(linDMA(g1, uint64(int(dram)+base+shift), dram+base, n))
						r.mustRun(linDMA(g1, va, dram, total))
					} else {
						r.mustRun(linDMA(g1, uint64(int(va)+base+shift), va+base, n))
					}
					require.Truef(t, bytes.Equal(want, buf), "shift %d, on device %v", shift, onDevice)
				}
			}
		})
	}
}

// TestDMASplitMappings: a transfer crossing two adjacent host mappings is
// translated piecewise; a byte past the last mapping faults.
func TestDMASplitMappings(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			a := hostMem(t, 8192)
			// b must not start on a 2 MiB boundary, or the hint next to
			// vaA could not be honoured (smallPageMem).
			b := smallPageMem(t, 8192)
			// Far from where other mappings go, so nothing follows vaB.
			vaA, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&a[0]), 8192, r.d.amap.pmmuBase+1<<30, 0)
			require.NoError(t, err)
			vaB, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&b[0]), 8192, vaA+8192, 0)
			require.NoError(t, err)
			require.Equal(t, vaA+8192, vaB, "hint honoured: the mappings are adjacent")
			copy(a[4096:], pattern(4096, 1))
			copy(b, pattern(4096, 2))
			dst, dva := r.host(8192)
			r.mustRun(linDMA(r.g1, dva, vaA+4096, 8192))
			require.Equal(t, cat(pattern(4096, 1), pattern(4096, 2)), dst)

			out, err := r.run(linDMA(r.g1, dva, vaB+4096, 4097))
			isErrno(t, err, unix.EIO)
			require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
			require.NoError(t, hlsys.MemUnmap(r.b, vaA))
			out, err = r.run(linDMA(r.g1, dva, vaA, 8))
			isErrno(t, err, unix.EIO)
			require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
		})
	}
}

func TestDMAFaults(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			g1 := r.g1
			src, sva := r.host(4096)
			_, dva := r.host(4096)
			copy(src, pattern(4096, 1))
			// A mapping with nothing mapped after it.
			lone := hostMem(t, 4096)
			lva, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&lone[0]), 4096, r.d.amap.pmmuBase+1<<30, 0)
			require.NoError(t, err)
			cases := map[string][]byte{
				"unmapped dst":     linDMA(g1, 0xFFFF_0000_0000, sva, 16),
				"raw host pointer": linDMA(g1, addrOf(src), sva, 16),
				"past the mapping": linDMA(g1, dva, lva, 4097),
			}
			if !g1 {
				cases["unknown opcode"] = pkt8(0x1F << 24)
				cases["not emulated"] = pkt8(ctlWReg32)
				cases["truncated"] = linDMA(g1, dva, sva, 16)[:16]
				cases["endian swap"] = linDMACtl(ctlLinDMA|2, dva, sva, 16)
			} else {
				cases["transpose"] = linDMACtl(ctlLinDMA|ctlRB|ctlLin|2, dva, sva, 16)
			}
			for name, cb := range cases {
				t.Run(name, func(t *testing.T) {
					before := r.d.Stats().EngineFaults
					out, err := r.run(cb)
					isErrno(t, err, unix.EIO)
					require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
					require.Equal(t, before+1, r.d.Stats().EngineFaults)
				})
			}
			ev, err := hlsys.GetEvents(r.b)
			require.NoError(t, err)
			require.NotZero(t, ev&hlsys.NotifierGeneralHWErr)
			if !g1 {
				require.NotZero(t, ev&hlsys.NotifierUndefinedOpcode)
			}
			// The device keeps working.
			r.mustRun(linDMA(g1, dva, sva, 4096))
		})
	}
}

// TestHostMemoryGone: host pages made inaccessible behind a live mapping
// make the DMA fail cleanly (EFAULT inside, ABORTED outside), never crash.
func TestHostMemoryGone(t *testing.T) {
	r := newRig(t, Config{})
	m, va := r.host(8192)
	require.NoError(t, unix.Mprotect(m, unix.PROT_NONE))
	_, dva := r.host(8192)
	out, err := r.run(linDMA(false, dva, va, 8192))
	isErrno(t, err, unix.EIO)
	require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
	out, err = r.run(linDMA(false, va, dva, 8192))
	isErrno(t, err, unix.EIO)
	require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
}

func TestMultiQueueCS(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			g1 := r.g1
			var chunks []hlsys.CSChunk
			var dsts [][]byte
			src, sva := r.host(65536)
			copy(src, pattern(65536, 8))
			for _, q := range r.d.EmulatedQueues() {
				d, dva := r.host(65536)
				dsts = append(dsts, d)
				chunks = append(chunks, r.chunk(q, linDMA(g1, dva, sva, 65536)))
			}
			seq, err := r.submit(0, 0, chunks...)
			require.NoError(t, err)
			out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			for _, d := range dsts {
				require.Equal(t, pattern(65536, 8), d)
			}

			// Queue order: two CSs on one queue run in submission order.
			a, ava := r.host(4096)
			bb, bva := r.host(4096)
			c, cva := r.host(4096)
			copy(a, pattern(4096, 6))
			copy(bb, pattern(4096, 7))
			s1, err := r.submit(0, 0, r.chunk(1, linDMA(g1, bva, ava, 4096)))
			require.NoError(t, err)
			s2, err := r.submit(0, 0, r.chunk(1, linDMA(g1, cva, bva, 4096)))
			require.NoError(t, err)
			_, err = hlsys.WaitForCS(r.b, s2, uint64(safety.Microseconds()))
			require.NoError(t, err)
			_, err = hlsys.WaitForCS(r.b, s1, 0)
			require.NoError(t, err)
			require.Equal(t, pattern(4096, 6), c)
		})
	}
}

func TestWaitCS(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m, MaxPendingCS: 4})
			b := r.b
			// Sequence number 0 has no fence: COMPLETED + GONE
			// (hl_ctx_get_fence returns NULL for its never-used slot).
			out, err := hlsys.WaitForCS(b, 0, 0)
			require.NoError(t, err)
			require.Equal(t, hlsys.WaitCSOut{Status: hlsys.WaitCSStatusCompleted, Flags: hlsys.WaitCSStatusFlagGone}, out)
			_, err = hlsys.WaitForCS(b, 1, 0)
			isErrno(t, err, unix.EINVAL)

			// TIMESTAMP: a completion time is returned.
			seq, err := r.submit(hlsys.CSFlagsTimestamp, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			require.Equal(t, uint64(1), seq)
			out, err = hlsys.WaitForCS(b, seq, uint64(safety.Microseconds()))
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			require.Equal(t, uint32(hlsys.WaitCSStatusFlagTimestampVld), out.Flags)
			require.Positive(t, out.TimestampNsec)
			_, err = hlsys.WaitForCS(b, 2, 0)
			isErrno(t, err, unix.EINVAL)

			// BUSY: poll and a short timeout on a delayed CS.
			r.d.DelayNextCS(1, 300*time.Millisecond)
			seq, err = r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			out, err = hlsys.WaitForCS(b, seq, 0)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status)
			out, err = hlsys.WaitForCS(b, seq, 1000)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status)
			out, err = hlsys.WaitForCS(b, seq, 1<<32) // wraps to 0, like usecs_to_jiffies' unsigned int
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status)

			// EAGAIN while the slot of seq+4 is still busy; nothing consumed.
			r.d.DelayNextCS(3, 20*time.Millisecond)
			for i := 0; i < 3; i++ {
				_, err := r.submit(0, 0, r.chunk(0, nop()))
				require.NoError(t, err)
			}
			_, err = r.submit(0, 0, r.chunk(0, nop()))
			isErrno(t, err, unix.EAGAIN)
			out, err = hlsys.WaitForCS(b, seq, uint64(safety.Microseconds()))
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			next, err := r.submit(0, 0, r.chunk(0, nop()))
			require.NoError(t, err)
			require.Equal(t, seq+4, next)

			// Seq 1 is older than the 4-slot window now, but it had
			// CS_FLAGS_TIMESTAMP: its outcome was stored, and the first
			// wait pops it (COMPLETED with the timestamp, no GONE); the
			// next one finds nothing and reports GONE.
			out, err = hlsys.WaitForCS(b, 1, 0)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			require.Equal(t, uint32(hlsys.WaitCSStatusFlagTimestampVld), out.Flags)
			require.Positive(t, out.TimestampNsec)
			out, err = hlsys.WaitForCS(b, 1, 0)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			require.Equal(t, uint32(hlsys.WaitCSStatusFlagGone), out.Flags)
			// Seq 2 (no CS_FLAGS_TIMESTAMP) is gone as well: whatever its
			// fate, the driver no longer knows it and reports COMPLETED +
			// GONE.
			out, err = hlsys.WaitForCS(b, 2, 0)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusFlagGone), out.Flags)

			// MAX_SCHEDULE_TIMEOUT waits without limit.
			out, err = hlsys.WaitForCS(b, next, 1<<63-1)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)

			// The whole output is rewritten, even on EINVAL.
			a := hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: 1000, TimeoutUs: 5, CqCountersOffset: 7}}
			require.ErrorIs(t, hlsys.WaitCS(b, &a), unix.EINVAL)
			require.Equal(t, hlsys.WaitCSArgs{}, a)

			// Multi-CS and interrupt waits are not emulated.
			a = hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: 1, Flags: hlsys.WaitCSFlagsMultiCS}}
			err = hlsys.WaitCS(b, &a)
			if m == ModelGaudi2 {
				require.ErrorIs(t, err, unix.EPERM)
			} else {
				require.ErrorIs(t, err, unix.EOPNOTSUPP)
			}
			a = hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: 1, Flags: hlsys.WaitCSFlagsInterrupt}}
			err = hlsys.WaitCS(b, &a)
			if m == ModelGaudi1 {
				require.ErrorIs(t, err, unix.EPERM)
			} else {
				require.ErrorIs(t, err, unix.EOPNOTSUPP)
			}
		})
	}
}

// TestWaitWakesPromptly: a blocked wait returns when the CS completes,
// long before its timeout (the timeout is a safety net, not asserted).
func TestWaitWakes(t *testing.T) {
	r := newRig(t, Config{})
	r.d.DelayNextCS(1, 20*time.Millisecond)
	seq, err := r.submit(0, 0, r.chunk(0, nop()))
	require.NoError(t, err)
	out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
}

// TestConcurrentSubmitters drives one context from many goroutines.
func TestConcurrentSubmitters(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m, MaxPendingCS: 8, DRAMSize: 64 << 20})
			const workers, iters, n = 4, 40, 8192
			type job struct {
				src, dst []byte
				chunk    hlsys.CSChunk
			}
			jobs := make([]job, workers)
			qs := r.d.EmulatedQueues()[:4] // Gaudi1: DMA_0_x; Gaudi2: PDMA 0_0, 0_1, 1_0 and an EDMA queue
			for w := range jobs {
				src, sva := r.host(n)
				dst, dva := r.host(n)
				copy(src, pattern(n, byte(w)))
				dram := r.dram(n)
				jobs[w] = job{src, dst, r.chunk(qs[w%len(qs)], cat(linDMA(r.g1, dram, sva, n), linDMA(r.g1, dva, dram, n)))}
			}
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range jobs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < iters; i++ {
						var out hlsys.CSOut
						var err error
						for {
							out, err = hlsys.SubmitCS(r.b, nil, []hlsys.CSChunk{jobs[w].chunk}, 0, 0)
							if err == nil || !isEAGAIN(err) {
								break
							}
							time.Sleep(50 * time.Microsecond)
						}
						if err != nil {
							errs <- err
							return
						}
						if _, err := hlsys.WaitForCS(r.b, out.Seq, uint64(safety.Microseconds())); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			for w := range jobs {
				require.Equal(t, jobs[w].src, jobs[w].dst)
			}
			require.Equal(t, uint64(workers*iters), r.d.Stats().CSCompleted)
		})
	}
}

func isEAGAIN(err error) bool { return errors.Is(err, unix.EAGAIN) }

// TestGaudi2CBInDRAM: a Gaudi2 user CB may live in DRAM; it is fetched
// through the device MMU.
func TestGaudi2CBInDRAM(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2})
	src, sva := r.host(4096)
	dst, dva := r.host(4096)
	copy(src, pattern(4096, 2))
	cbHost, cbva := r.host(4096)
	copy(cbHost, linDMA(false, dva, sva, 4096))
	dram := r.dram(4096)
	r.mustRun(linDMA(false, dram, cbva, 24)) // place the CB in DRAM
	seq, err := r.submit(0, 0, hlsys.CSChunk{CBHandle: dram, CBSize: 24, Flags: hlsys.CSChunkFlagsUserAllocCB})
	require.NoError(t, err)
	_, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	require.NoError(t, err)
	require.Equal(t, pattern(4096, 2), dst)

	// A CB VA inside the DMMU range but unmapped: accepted at submission
	// (the driver checks the range only), faults when fetched.
	seq, err = r.submit(0, 0, hlsys.CSChunk{CBHandle: dram + 64<<20, CBSize: 24, Flags: hlsys.CSChunkFlagsUserAllocCB})
	require.NoError(t, err)
	out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	isErrno(t, err, unix.EIO)
	require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
}
