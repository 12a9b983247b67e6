package hlsim

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// The tests of this file pin the driver rules of RULES.md that the older
// tests did not cover; each names the row it shows.

// TestRulesGaudi2Queues: gaudi2_is_queue_enabled. PDMA_0_0, PDMA_0_1 and
// PDMA_1_0 (0, 1, 4) and the 32 EDMA queues take a user CB and run it;
// the other PDMA streams are disabled (EINVAL), the CPU queue is driver
// only, compute queues are taken by the driver but not emulated.
func TestRulesGaudi2Queues(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2})
	src, sva := r.host(4096)
	copy(src, pattern(4096, 3))
	want := map[uint32]unix.Errno{}
	for q := uint32(0); q <= g2QueueSize; q++ {
		want[q] = unix.EOPNOTSUPP
	}
	for _, q := range []uint32{0, 1, 4} {
		want[q] = 0
	}
	for _, q := range []uint32{2, 3, 5, 6, 7, hlsys.Gaudi2QueueCPUPQ, g2QueueSize} {
		want[q] = unix.EINVAL
	}
	for _, b := range []uint32{8, 12, 48, 52, 84, 88, 120, 124} {
		for q := b; q < b+4; q++ {
			want[q] = 0
		}
	}
	var runs []uint32
	for q := uint32(0); q <= g2QueueSize; q++ {
		dst, dva := r.host(4096)
		_, err := r.submit(0, 0, r.chunk(q, linDMA(false, dva, sva, 4096)))
		if want[q] != 0 {
			isErrno(t, err, want[q])
			continue
		}
		runs = append(runs, q)
		require.NoError(t, err, "queue %d", q)
		r.drain()
		require.Equal(t, pattern(4096, 3), dst, "queue %d", q)
	}
	require.Equal(t, r.d.EmulatedQueues(), runs)
	require.Len(t, runs, 3+32)
}

// drain waits for every CS submitted so far.
func (r *rig) drain() {
	r.t.Helper()
	r.d.mu.Lock()
	c := r.d.ctx
	r.d.mu.Unlock()
	c.csMu.Lock()
	last := c.nextSeq - 1
	c.csMu.Unlock()
	_, err := hlsys.WaitForCS(r.b, last, uint64(safety.Microseconds()))
	require.NoError(r.t, err)
}

// TestRulesNotOperational: hl_device_operational gates CS (EBUSY), WAIT_CS
// (EBUSY), CB and MEMORY (EBUSY); hl_device_open answers EAGAIN in reset,
// EPERM in malfunction or needs-reset, and only then EBUSY for an active
// context.
func TestRulesNotOperational(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			ch := r.chunk(0, nop())
			seq, err := r.submit(0, 0, ch)
			require.NoError(t, err)
			r.drain()
			cases := []struct {
				status uint32
				open   unix.Errno
			}{
				{hlsys.DeviceStatusInReset, unix.EAGAIN},
				{hlsys.DeviceStatusInResetAfterDeviceRelease, unix.EAGAIN},
				{hlsys.DeviceStatusMalfunction, unix.EPERM},
				{hlsys.DeviceStatusNeedsReset, unix.EPERM},
				{hlsys.DeviceStatusOperational, unix.EBUSY},
			}
			for _, tc := range cases {
				r.d.ForceStatus(tc.status)
				_, err := r.d.Open()
				isErrno(t, err, tc.open)
				if tc.status == hlsys.DeviceStatusOperational {
					continue
				}
				_, err = hlsys.WaitForCS(r.b, seq, 0)
				isErrno(t, err, unix.EBUSY)
				_, err = r.submit(0, 0, ch)
				isErrno(t, err, unix.EBUSY)
				_, err = hlsys.CBCreate(r.b, 4096, 0)
				isErrno(t, err, unix.EBUSY)
				_, err = hlsys.MemAlloc(r.b, 4096, 0, 0)
				isErrno(t, err, unix.EBUSY)
			}
			// Back to normal: the CS is still there to wait for.
			out, err := hlsys.WaitForCS(r.b, seq, 0)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
		})
	}
}

// TestRulesScheduleEPERM: a CS that passed validation while the device was
// operational but meets a device in reset when it is scheduled
// (hl_hw_queue_schedule_cs) fails with EPERM, after it consumed its
// sequence number.
func TestRulesScheduleEPERM(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			ch := r.chunk(0, nop())
			r.d.beforeSchedule = func() { r.d.status.Store(hlsys.DeviceStatusInReset) }
			_, err := r.submit(0, 0, ch)
			isErrno(t, err, unix.EPERM)
			r.d.beforeSchedule = nil
			r.d.ForceStatus(hlsys.DeviceStatusOperational)
			seq, err := r.submit(0, 0, ch)
			require.NoError(t, err)
			require.Equal(t, uint64(2), seq)
			out, err := hlsys.WaitForCS(r.b, 1, 0)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			require.Equal(t, uint64(1), r.d.Stats().CSSubmitted, "the refused CS was never submitted")
		})
	}
}

// TestRulesGaudi1LinDMABits: the Gaudi1 parser (MMU mode) does not check a
// LIN_DMA's lin and RB bits. Without RB the copy runs; without lin the CS
// is accepted and the emulator fails it at execution (what the engine
// does with lin=0 is not in the source).
func TestRulesGaudi1LinDMABits(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi1})
	src, sva := r.host(4096)
	dst, dva := r.host(4096)
	copy(src, pattern(4096, 5))
	r.mustRun(linDMACtl(ctlLinDMA|ctlLin|ctlMB, dva, sva, 4096))
	require.Equal(t, pattern(4096, 5), dst)
	out, err := r.run(linDMACtl(ctlLinDMA|ctlRB|ctlMB, dva, sva, 4096))
	isErrno(t, err, unix.EIO)
	require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
}

// TestRulesCBSizes: CB CREATE rounds sizes below a page up to a page (0
// included) and refuses more than HL_MAX_CB_SIZE; a chunk may use up to
// the CB's size (cb->size, at least a page), not the requested size.
func TestRulesCBSizes(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi1})
	for _, size := range []uint32{0, 7, 100} {
		h, err := hlsys.CBCreate(r.b, size, 0)
		require.NoError(t, err)
		mm, err := r.b.Mmap(int64(h), 4096)
		require.NoError(t, err, "size %d maps one page", size)
		for i := 0; i < 4096; i += 8 {
			copy(mm[i:], nop())
		}
		seq, err := r.submit(0, 0, hlsys.CSChunk{CBHandle: h, CBSize: 4096})
		require.NoError(t, err, "size %d: a chunk may use the whole page", size)
		out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
		require.NoError(t, err)
		require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
		_, err = r.submit(0, 0, hlsys.CSChunk{CBHandle: h, CBSize: 4104})
		isErrno(t, err, unix.EINVAL)
	}
	// Above a page the CB's size is what was asked for.
	h, err := hlsys.CBCreate(r.b, 5000, 0)
	require.NoError(t, err)
	mm, err := r.b.Mmap(int64(h), 8192)
	require.NoError(t, err)
	for i := 0; i+8 <= 5000; i += 8 {
		copy(mm[i:], nop())
	}
	seq, err := r.submit(0, 0, hlsys.CSChunk{CBHandle: h, CBSize: 5000})
	require.NoError(t, err)
	_, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	require.NoError(t, err)
	_, err = r.submit(0, 0, hlsys.CSChunk{CBHandle: h, CBSize: 5008})
	isErrno(t, err, unix.EINVAL)
	_, err = hlsys.CBCreate(r.b, hlsys.MaxCBSize+1, 0)
	isErrno(t, err, unix.EINVAL)
}

// TestRulesOutcomeStore: a CS with CS_FLAGS_TIMESTAMP leaves its outcome
// in a 256-entry store; a WAIT_CS on its sequence number after the fence
// is gone pops it (an aborted CS then fails the wait with EIO), the oldest
// outcome is dropped when the store is full, and a CS without the flag is
// simply GONE.
func TestRulesOutcomeStore(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2, MaxPendingCS: 2})
	nopChunk := r.chunk(0, nop())
	submitWait := func(flags uint32) uint64 {
		seq, err := r.submit(flags, 0, nopChunk)
		require.NoError(t, err)
		_, _ = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
		return seq
	}
	r.d.AbortNextCS(1)
	aborted := submitWait(hlsys.CSFlagsTimestamp) // outcome: ABORTED
	plain := submitWait(0)                        // no outcome stored
	for i := 0; i < outcomeHistory; i++ {
		submitWait(hlsys.CSFlagsTimestamp)
	}
	// 257 timestamped CSs ended: the oldest (aborted) outcome was lost.
	out, err := hlsys.WaitForCS(r.b, aborted, 0)
	require.NoError(t, err)
	require.Equal(t, hlsys.WaitCSOut{Status: hlsys.WaitCSStatusCompleted, Flags: hlsys.WaitCSStatusFlagGone}, out)
	out, err = hlsys.WaitForCS(r.b, plain, 0)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusFlagGone), out.Flags)

	// A fresh aborted, timestamped CS, pushed out of the slot window.
	r.d.AbortNextCS(1)
	aborted = submitWait(hlsys.CSFlagsTimestamp)
	submitWait(0)
	submitWait(0)
	submitWait(0)
	out, err = hlsys.WaitForCS(r.b, aborted, 0)
	isErrno(t, err, unix.EIO)
	require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
	out, err = hlsys.WaitForCS(r.b, aborted, 0)
	require.NoError(t, err, "the outcome was popped")
	require.Equal(t, uint32(hlsys.WaitCSStatusFlagGone), out.Flags)
}

// TestRulesMapHost: the USERPTR hint rules of map_device_va and
// get_va_block, and the huge-page choice made from DMA addresses.
func TestRulesMapHost(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			a := &r.d.amap
			buf := smallPageMem(t, 8*4096) // the hints below are not 2 MiB aligned
			hint := a.pmmuBase + 64<<20
			// Unaligned source with FORCE_HINT: EINVAL ("source memory is
			// not aligned").
			_, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&buf[100]), 4096, hint, hlsys.MemForceHint)
			isErrno(t, err, unix.EINVAL)
			// Without FORCE_HINT the driver's message says "ignored", but
			// get_va_block still takes the aligned hint.
			va, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&buf[100]), 4096, hint, 0)
			require.NoError(t, err)
			require.Equal(t, hint+100, va)
			// An aligned source takes a free aligned hint, with or without
			// FORCE_HINT; a taken hint with FORCE_HINT is ENOMEM.
			va2, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&buf[4*4096]), 4096, hint+1<<20, hlsys.MemForceHint)
			require.NoError(t, err)
			require.Equal(t, hint+1<<20, va2)
			_, err = hlsys.MemMapHost(r.b, unsafe.Pointer(&buf[5*4096]), 4096, hint+1<<20, hlsys.MemForceHint)
			isErrno(t, err, unix.ENOMEM)
			// A hint not aligned to the VA block alignment: ignored, or
			// ENOMEM with FORCE_HINT.
			_, err = hlsys.MemMapHost(r.b, unsafe.Pointer(&buf[6*4096]), 4096, hint+2<<20+100, hlsys.MemForceHint)
			isErrno(t, err, unix.ENOMEM)
			va3, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&buf[6*4096]), 4096, hint+2<<20+100, 0)
			require.NoError(t, err)
			require.NotEqual(t, hint+2<<20+100, va3)
			// A 2 MiB aligned source needs a 2 MiB aligned hint (its VA block
			// is 2 MiB aligned even with 4 KiB pages).
			big := hostMem(t, 6<<20)
			off := (2<<20 - int(addrOf(big)%(2<<20))) % (2 << 20)
			_, err = hlsys.MemMapHost(r.b, unsafe.Pointer(&big[off]), 4096, hint+3<<20+4096, hlsys.MemForceHint)
			isErrno(t, err, unix.ENOMEM)
			va4, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&big[off]), 2<<20, hint+4<<20, hlsys.MemForceHint)
			require.NoError(t, err)
			require.Equal(t, hint+4<<20, va4)
			require.False(t, hugeTLBBacked(addrOf(big[off:]), addrOf(big[off:])+2<<20), "anonymous 4 KiB pages are not huge")

			// Overflowing ranges are EINVAL before any pinning.
			a2 := hlsys.MemArgs{U: [3]uint64{^uint64(0) - 10, 0, 100}, Op: hlsys.MemOpMap, Flags: hlsys.MemUserPtr}
			require.ErrorIs(t, hlsys.Memory(r.b, &a2), unix.EINVAL)
			a2 = hlsys.MemArgs{U: [3]uint64{^uint64(0) - 4096 - 10, 0, 4096}, Op: hlsys.MemOpMap, Flags: hlsys.MemUserPtr}
			require.ErrorIs(t, hlsys.Memory(r.b, &a2), unix.EINVAL, "PAGE_ALIGN(addr+size) overflows")

			// hugetlbfs pages have 2 MiB aligned DMA addresses: huge PMMU
			// pages, when the machine has any to give.
			hp, err := unix.Mmap(-1, 0, 2<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB)
			if err != nil {
				t.Logf("no hugetlb pages (%v): huge mapping not exercised", err)
				return
			}
			defer func() { _ = unix.Munmap(hp) }()
			hp[0] = 1
			vah, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&hp[0]), 2<<20, 0, 0)
			require.NoError(t, err)
			require.GreaterOrEqual(t, vah, a.pmmuHuge)
		})
	}
}

// TestRulesExportGenerations: validate_export_params* and the importer's
// view per kernel generation. 6.3-6.6 validate addr+offset and a size of
// at least a page, then ignore the offset (the importer sees allocation
// byte 0 onwards: wrong bytes); 6.7+ want page multiples and honour the
// offset. Gaudi1 refuses any offset.
func TestRulesExportGenerations(t *testing.T) {
	for _, kernel := range []string{"6.3", "6.6", "6.7", "6.8"} {
		fixed := kernel >= "6.7"
		t.Run("Gaudi2/"+kernel, func(t *testing.T) {
			r := newRig(t, Config{Model: ModelGaudi2, Kernel: kernel, DRAMSize: 64 << 20})
			const n = 4 << 20
			h, err := hlsys.MemAlloc(r.b, n, 0, 0)
			require.NoError(t, err)
			addr, err := hlsys.MemMapDevice(r.b, h, 0, 0)
			require.NoError(t, err)
			const off = 1 << 20
			src, hva := r.host(n)
			copy(src, pattern(n, 11))
			copy(src[off:], pattern(8192, 99)) // the window differs from the allocation's start
			r.mustRun(linDMA(false, addr, hva, n))

			f, err := hlsys.MemExportDMABuf(r.b, addr, 8192, off)
			require.NoError(t, err)
			defer f.Close()
			v, err := r.d.DMABufView(f.Int())
			require.NoError(t, err)
			got := make([]byte, 8192)
			k, err := v.ReadAt(f.Int(), got, 0)
			require.NoError(t, err)
			require.Equal(t, 8192, k)
			if fixed {
				require.Equal(t, DMABufView{Start: off, Size: 8192}, v)
				require.True(t, bytes.Equal(pattern(8192, 99), got), "the importer sees the exported window")
			} else {
				require.Equal(t, DMABufView{Start: 0, Size: 8192}, v)
				require.True(t, bytes.Equal(pattern(8192, 11), got), "the offset was ignored: the importer sees allocation byte 0")
			}

			// Sizes that are not page multiples.
			g, err := hlsys.MemExportDMABuf(r.b, addr, 4096+8, 0)
			if fixed {
				isErrno(t, err, unix.EINVAL)
			} else {
				require.NoError(t, err)
				require.NoError(t, g.Close())
			}
			_, err = hlsys.MemExportDMABuf(r.b, addr, 0, 0)
			isErrno(t, err, unix.EINVAL)
			_, err = hlsys.MemExportDMABuf(r.b, addr, 4095, 0)
			isErrno(t, err, unix.EINVAL)
			_, err = hlsys.MemExportDMABuf(r.b, addr, 4096, 100)
			isErrno(t, err, unix.EINVAL)
			_, err = hlsys.MemExportDMABuf(r.b, addr, n, 4096)
			isErrno(t, err, unix.EINVAL)
		})
		t.Run("Gaudi1/"+kernel, func(t *testing.T) {
			r := newRig(t, Config{Model: ModelGaudi1, Kernel: kernel, DRAMSize: 64 << 20})
			addr := r.dram(1 << 20)
			_, err := hlsys.MemExportDMABuf(r.b, addr, 4096, 4096)
			isErrno(t, err, unix.EINVAL)
			g, err := hlsys.MemExportDMABuf(r.b, addr, 4096+8, 0)
			if fixed {
				isErrno(t, err, unix.EINVAL)
			} else {
				require.NoError(t, err)
				v, err := r.d.DMABufView(g.Int())
				require.NoError(t, err)
				require.Equal(t, DMABufView{Start: addr - r.info.DramBaseAddress, Size: 4096 + 8}, v)
				require.NoError(t, g.Close())
			}
		})
	}
	t.Run("view of a foreign fd", func(t *testing.T) {
		r := newRig(t, Config{})
		_, err := r.d.DMABufView(0)
		require.ErrorIs(t, err, ErrNotExported)
	})
}
