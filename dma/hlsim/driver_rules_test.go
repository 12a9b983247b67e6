package hlsim

import (
	"encoding/binary"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// The tests of this file pin driver rules a third reading of the driver
// source (2026-11-29) found the emulator getting wrong; each names its
// RULES.md row.

// TestRulesGaudi2AllocPageSize (M4): Gaudi2 does not set
// supports_user_set_page_size (gaudi2_set_fixed_properties,
// gaudi2_set_dram_properties), so set_alloc_page_size ignores the user's
// page size: any value, a non power of 2 included, allocates default
// pages. Nor does it set dmmu.supported_pages_mask, so
// DEV_MEM_ALLOC_PAGE_SIZES answers an empty mask.
func TestRulesGaudi2AllocPageSize(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2, DRAMSize: 64 << 20})
	page := r.info.DramPageSize
	for _, psize := range []uint64{3 << 12, 4096, 2048, 1 << 30} {
		h, err := hlsys.MemAlloc(r.b, 5000, psize, 0)
		require.NoError(t, err, "page size %#x", psize)
		u, err := hlsys.GetDramUsage(r.b)
		require.NoError(t, err)
		require.Equal(t, page, u.CtxDramMem, "page size %#x: one default page", psize)
		require.NoError(t, hlsys.MemFree(r.b, h))
	}

	out := make([]byte, 8)
	for i := range out {
		out[i] = 0xFF
	}
	a := &hlsys.InfoArgs{ReturnPointer: uint64(uintptr(unsafe.Pointer(&out[0]))), ReturnSize: 8, Op: infoDevMemAllocPageSizes}
	require.NoError(t, hlsys.Info(r.b, a))
	require.Zero(t, binary.LittleEndian.Uint64(out), "page_order_bitmask")
}

// TestRulesForceHintZero (M13, formerly X6): get_va_block fails a
// FORCE_HINT map whose block does not start at the hint, and with hint 0
// no block does ("Hint address 0x0 could not be respected"): MAP, of
// device memory and of host memory alike, is ENOMEM.
func TestRulesForceHintZero(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2, DRAMSize: 64 << 20})
	h, err := hlsys.MemAlloc(r.b, 4096, 0, 0)
	require.NoError(t, err)
	_, err = hlsys.MemMapDevice(r.b, h, 0, hlsys.MemForceHint)
	isErrno(t, err, unix.ENOMEM)
	buf := hostMem(t, 8192)
	_, err = hlsys.MemMapHost(r.b, unsafe.Pointer(&buf[0]), 8192, 0, hlsys.MemForceHint)
	isErrno(t, err, unix.ENOMEM)

	// Nothing was mapped: the handle frees, and plain maps still work.
	require.NoError(t, hlsys.MemFree(r.b, h))
	va, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&buf[0]), 8192, 0, 0)
	require.NoError(t, err)
	require.NoError(t, hlsys.MemUnmap(r.b, va))
}

// TestRulesGetEventsSize (D10): events_info wants room for the whole u64
// mask (return_size >= 8) and a pointer, else EINVAL, and only a read
// that is answered clears the mask.
func TestRulesGetEventsSize(t *testing.T) {
	r := newRig(t, Config{})
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	require.NoError(t, err)
	defer unix.Close(efd)
	require.NoError(t, hlsys.RegisterEventFD(r.b, efd))
	r.d.Reset()

	out := outBuf(t, 8)
	for _, size := range []uint32{1, 4, 7} {
		a := &hlsys.InfoArgs{ReturnPointer: addrOf(out), ReturnSize: size, Op: hlsys.InfoGetEvents}
		isErrno(t, hlsys.Info(r.b, a), unix.EINVAL)
	}
	a := &hlsys.InfoArgs{ReturnSize: 8, Op: hlsys.InfoGetEvents}
	isErrno(t, hlsys.Info(r.b, a), unix.EINVAL)
	require.Zero(t, binary.LittleEndian.Uint64(out), "nothing written")

	ev, err := hlsys.GetEvents(r.b)
	require.NoError(t, err)
	require.Equal(t, uint64(hlsys.NotifierDeviceReset), ev, "the refused reads did not clear the mask")
}

// TestRulesFailedCallsClearArgs (D11, formerly X7): hl_mem_ioctl clears
// the args of ALLOC, MAP and EXPORT_DMABUF_FD and writes their output
// (handle 0, VA 0, fd -EBADF) whether the call succeeded or not; only
// ALLOC of 0 bytes fails before the clear. hl_cb_ioctl does the same for
// CB CREATE (handle 0).
func TestRulesFailedCallsClearArgs(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2, DRAMSize: 64 << 20})
	ebadf := -int32(unix.EBADF)
	badFD := uint64(uint32(ebadf)) // out.fd, an s32
	for _, tc := range []struct {
		name  string
		in    hlsys.MemArgs
		errno unix.Errno
		out   hlsys.MemArgs
	}{
		{"ALLOC 0 bytes: args kept", hlsys.MemArgs{U: [3]uint64{0, 7, 9}, Op: hlsys.MemOpAlloc, Flags: hlsys.MemContiguous},
			unix.EINVAL, hlsys.MemArgs{U: [3]uint64{0, 7, 9}, Op: hlsys.MemOpAlloc, Flags: hlsys.MemContiguous}},
		{"ALLOC beyond the DRAM", hlsys.MemArgs{U: [3]uint64{1 << 40, 0, 9}, Op: hlsys.MemOpAlloc},
			unix.ENOMEM, hlsys.MemArgs{}},
		{"MAP of no handle", hlsys.MemArgs{U: [3]uint64{0, 999, 9}, Op: hlsys.MemOpMap, Flags: 0},
			unix.EINVAL, hlsys.MemArgs{}},
		{"MAP USERPTR of 0 bytes", hlsys.MemArgs{U: [3]uint64{4096, 0, 0}, Op: hlsys.MemOpMap, Flags: hlsys.MemUserPtr},
			unix.EINVAL, hlsys.MemArgs{}},
		{"EXPORT of no mapping", hlsys.MemArgs{U: [3]uint64{0x1234000, 4096, 0}, Op: hlsys.MemOpExportDMABuf, Flags: hlsys.DMABufFlags},
			unix.EINVAL, hlsys.MemArgs{U: [3]uint64{badFD}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.in
			isErrno(t, hlsys.Memory(r.b, &a), tc.errno)
			require.Equal(t, tc.out, a)
		})
	}
	t.Run("MAP_BLOCK of no block (Gaudi3)", func(t *testing.T) {
		// map_block zeroes block_handle and block_size first; the rest
		// of the union is not cleared.
		r3 := newRig(t, Config{Model: ModelGaudi3})
		a := hlsys.MemArgs{U: [3]uint64{0x1234, 0xAAAA_BBBB_CCCC_DDDD, 9}, Op: hlsys.MemOpMapBlock}
		isErrno(t, hlsys.Memory(r3.b, &a), unix.EINVAL)
		require.Equal(t, hlsys.MemArgs{U: [3]uint64{0, 0xAAAA_BBBB_0000_0000, 9}, Op: hlsys.MemOpMapBlock}, a)
	})
	t.Run("CB CREATE above HL_MAX_CB_SIZE", func(t *testing.T) {
		a := hlsys.CBArgs{Handle: 5, Op: hlsys.CBOpCreate, CBSize: hlsys.MaxCBSize + 1, Flags: hlsys.CBFlagsMap}
		isErrno(t, hlsys.CommandBuffer(r.b, &a), unix.EINVAL)
		require.Equal(t, hlsys.CBArgs{}, a)
	})
}

// TestRulesCBDestroyWhileMapped (B9, formerly X8): the user's mmap holds
// a reference on the CB (hl_mem_mgr_mmap), so DESTROY of a mapped CB only
// drops the handle's reference (hl_mmap_mem_buf_put_handle): the handle
// still resolves (INFO answers, a second DESTROY is EINVAL through
// is_handle_destroyed), and the CB memory and its CB_FLAGS_MAP device VA
// live on until munmap releases the last reference
// (hl_cb_mmap_mem_release, cb_unmap_mem).
func TestRulesCBDestroyWhileMapped(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2})
	h, err := hlsys.CBCreate(r.b, 4096, hlsys.CBFlagsMap)
	require.NoError(t, err)
	va, err := hlsys.CBDeviceVA(r.b, h)
	require.NoError(t, err)
	cbm, err := r.b.Mmap(int64(h), 4096)
	require.NoError(t, err)
	src, sva := r.host(4096)
	dst, dva := r.host(4096)
	copy(src, pattern(4096, 5))
	copy(cbm, linDMA(false, dva, sva, 4096))
	chunk := hlsys.CSChunk{CBHandle: va, CBSize: 24, Flags: hlsys.CSChunkFlagsUserAllocCB}

	require.NoError(t, hlsys.CBDestroy(r.b, h))
	isErrno(t, hlsys.CBDestroy(r.b, h), unix.EINVAL)
	got, err := hlsys.CBDeviceVA(r.b, h)
	require.NoError(t, err, "the mmap keeps the handle")
	require.Equal(t, va, got)

	seq, err := r.submit(0, 0, chunk)
	require.NoError(t, err)
	out, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status, "the device VA outlives DESTROY")
	require.Equal(t, pattern(4096, 5), dst)

	// The munmap drops the last reference: handle and VA are gone.
	require.NoError(t, r.b.Munmap(cbm))
	_, err = hlsys.CBDeviceVA(r.b, h)
	isErrno(t, err, unix.EINVAL)
	seq, err = r.submit(0, 0, chunk)
	require.NoError(t, err)
	out, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	isErrno(t, err, unix.EIO)
	require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
}

// TestRulesStagedSubmission (C27, formerly X5): gaudi2_sw_init does not
// set supports_staged_submission, so hl_cs_sanity_checks refuses
// HL_CS_FLAGS_STAGED_SUBMISSION with EPERM, after the operational check
// and before the type flags, without a sequence number. The FIRST and
// LAST bits mean nothing without it (cs_staged_submission): such a CS
// runs as a plain one, on every model.
func TestRulesStagedSubmission(t *testing.T) {
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			if m == ModelGaudi2 {
				ch := r.chunk(0, nop())
				arr := outBuf(t, int(unsafe.Sizeof(ch)))
				copy(arr, unsafe.Slice((*byte)(unsafe.Pointer(&ch)), len(arr)))
				for _, flags := range []uint32{0x40, 0x40 | 0x80, 0x40 | hlsys.CSFlagsSignal | hlsys.CSFlagsWait} {
					a := hlsys.CSArgs{In: hlsys.CSIn{ChunksExecute: addrOf(arr), NumChunksExecute: 1, CSFlags: flags}}
					isErrno(t, hlsys.CommandSubmission(r.b, &a), unix.EPERM)
					eperm := -int32(unix.EPERM)
					require.Equal(t, hlsys.CSOut{Seq: ^uint64(0), Status: uint32(eperm)}, *a.Out(), "flags %#x", flags)
				}
			}
			for i, flags := range []uint32{0x80, 0x100} {
				seq, err := r.submit(flags, 0, r.chunk(0, nop()))
				require.NoError(t, err, "flags %#x", flags)
				require.Equal(t, uint64(i+1), seq, "no sequence number used before")
				w, err := hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
				require.NoError(t, err)
				require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), w.Status)
			}
		})
	}
}

// TestRulesRestoreChunksIgnored (C26): neither gaudi_sw_init nor
// gaudi2_sw_init sets supports_ctx_switch, so hl_cs_ctx_switch runs the
// restore phase only with HL_CS_FLAGS_FORCE_RESTORE; without it the
// restore chunks are never read and the execute chunks run as usual. The
// restore phase itself is not emulated (EOPNOTSUPP).
func TestRulesRestoreChunksIgnored(t *testing.T) {
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			src, sva := r.host(4096)
			dst, dva := r.host(4096)
			copy(src, pattern(4096, 7))
			ch := r.chunk(0, linDMA(m == ModelGaudi1, dva, sva, 4096))
			arr := outBuf(t, int(unsafe.Sizeof(ch)))
			copy(arr, unsafe.Slice((*byte)(unsafe.Pointer(&ch)), len(arr)))

			// An unreadable restore array: the driver does not look at it.
			a := hlsys.CSArgs{In: hlsys.CSIn{ChunksRestore: 0x10, NumChunksRestore: 3, ChunksExecute: addrOf(arr), NumChunksExecute: 1}}
			require.NoError(t, hlsys.CommandSubmission(r.b, &a))
			require.Equal(t, uint64(1), a.Out().Seq)
			w, err := hlsys.WaitForCS(r.b, 1, uint64(safety.Microseconds()))
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), w.Status)
			require.Equal(t, pattern(4096, 7), dst)

			a = hlsys.CSArgs{In: hlsys.CSIn{ChunksRestore: addrOf(arr), NumChunksRestore: 1, ChunksExecute: addrOf(arr), NumChunksExecute: 1, CSFlags: hlsys.CSFlagsForceRestore}}
			isErrno(t, hlsys.CommandSubmission(r.b, &a), unix.EOPNOTSUPP)
		})
	}
}

// TestRulesGaudi3InterruptWaitOutput (W17): what hl_interrupt_wait_ioctl
// writes back. A wait that fails (the KERNEL_CQ form aborted by a reset:
// -EIO) returns before the args are cleared, so they hold the caller's
// input. Otherwise they are cleared and hold the status, with
// TIMESTAMP_VLD and the time when _hl_interrupt_wait_ioctl took one: on a
// completion, and on the immediate BUSY of timeout 0; not when the wait
// timed out. The user-address form reports a reset as ABORTED with rc 0,
// and takes a time only on a completion.
func TestRulesGaudi3InterruptWaitOutput(t *testing.T) {
	r := newG3Rig(t, Config{}, 0)
	id := uint32(g3FirstUserInterrupt)
	kcq := func(target, us uint64) (hlsys.WaitCSArgs, error) {
		a := hlsys.WaitCSArgs{In: hlsys.WaitCSIn{
			Seq: r.cqH, TimeoutUs: target, InterruptTimeoutUs: us,
			Flags: hlsys.WaitCSFlagsInterrupt | hlsys.WaitCSFlagsInterruptKernelCQ | id<<hlsys.WaitCSFlagsInterruptShift,
		}}
		err := hlsys.WaitCS(r.b, &a)
		return a, err
	}
	vld := func(t *testing.T, a hlsys.WaitCSArgs, status uint32) {
		t.Helper()
		out := a.Out()
		require.Equal(t, status, out.Status)
		require.Equal(t, uint32(hlsys.WaitCSStatusFlagTimestampVld), out.Flags)
		require.NotZero(t, out.TimestampNsec)
	}
	a, err := kcq(0, 0)
	require.NoError(t, err)
	vld(t, a, hlsys.WaitCSStatusCompleted)
	a, err = kcq(1, 0)
	require.NoError(t, err)
	vld(t, a, hlsys.WaitCSStatusBusy)
	a, err = kcq(1, 1000)
	require.NoError(t, err)
	require.Equal(t, hlsys.WaitCSOut{Status: hlsys.WaitCSStatusBusy}, *a.Out(), "a timed-out wait has no time")

	ctr := (*uint64)(unsafe.Pointer(&r.cqMem[0]))
	anyCQ := uint32(hlsys.WaitCSFlagsAnyCQInterrupt >> hlsys.WaitCSFlagsInterruptShift)
	out, err := hlsys.WaitForInterruptUser(r.b, ctr, 1, anyCQ, 0)
	require.NoError(t, err)
	require.Equal(t, hlsys.WaitCSOut{Status: hlsys.WaitCSStatusBusy}, out, "user-address form: no time on BUSY")
	out, err = hlsys.WaitForInterruptUser(r.b, ctr, 0, anyCQ, 0)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
	require.Equal(t, uint32(hlsys.WaitCSStatusFlagTimestampVld), out.Flags)

	// A reset aborts both forms of a blocked wait.
	registerEventFD(t, r.rig)
	type res struct {
		a   hlsys.WaitCSArgs
		out hlsys.WaitCSOut
		err error
	}
	kdone, udone := make(chan res, 1), make(chan res, 1)
	go func() {
		a, err := kcq(100, uint64(safety/time.Microsecond))
		kdone <- res{a: a, err: err}
	}()
	go func() {
		out, err := hlsys.WaitForInterruptUser(r.b, ctr, 100, anyCQ, uint64(safety/time.Microsecond))
		udone <- res{out: out, err: err}
	}()
	require.Eventually(t, func() bool { return r.b.(*hctx).waiting.Load() == 2 }, safety, time.Millisecond)
	r.d.Reset()
	k := <-kdone
	isErrno(t, k.err, unix.EIO)
	require.Equal(t, r.cqH, k.a.In.Seq, "the failed wait left its input in the args")
	require.Equal(t, uint64(100), k.a.In.TimeoutUs)
	u := <-udone
	require.NoError(t, u.err)
	require.Equal(t, hlsys.WaitCSOut{Status: hlsys.WaitCSStatusAborted}, u.out)
}

// TestRulesMaxPendingCSPerModel (C7): allocate_cs refuses a CS with
// EAGAIN while slot seq & (max_pending_cs - 1) holds a CS in flight;
// max_pending_cs is GAUDI2_MAX_PENDING_CS (64) on Gaudi2 and
// GAUDI_MAX_PENDING_CS (SZ_16K) on Gaudi1 (gaudi2P.h, gaudiP.h, set by
// the *_set_fixed_properties). A Gaudi1 context takes a 65th CS in
// flight, a Gaudi2 one does not.
func TestRulesMaxPendingCSPerModel(t *testing.T) {
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			r.d.HangNextCS(DefaultMaxPendingCS + 1)
			for i := range DefaultMaxPendingCS {
				_, err := r.submit(0, 0, r.chunk(0, nop()))
				require.NoError(t, err, "CS %d", i)
			}
			_, err := r.submit(0, 0, r.chunk(0, nop()))
			if m == ModelGaudi2 {
				isErrno(t, err, unix.EAGAIN)
				return
			}
			require.NoError(t, err, "Gaudi1 has 16K completion slots")
		})
	}
}

// TestRulesCBMapUnsupported (B5): cb_map_mem refuses CB_FLAGS_MAP on a
// device without supports_cb_mapping (Gaudi1) with -EINVAL, but it runs
// inside the memory manager's alloc callback: hl_mmap_mem_buf_alloc
// turns any callback failure into NULL and hl_cb_create answers -ENOMEM.
func TestRulesCBMapUnsupported(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi1})
	_, err := hlsys.CBCreate(r.b, 4096, hlsys.CBFlagsMap)
	isErrno(t, err, unix.ENOMEM)
	h, err := hlsys.CBCreate(r.b, 4096, 0)
	require.NoError(t, err, "the failed CREATE left nothing behind")
	require.NoError(t, hlsys.CBDestroy(r.b, h))
}

// TestRulesOutputOnlyCalls (D11): CB INFO clears only args->out (8
// bytes) before writing usage_cnt or device_va (hl_cb_ioctl), and
// MAP_BLOCK writes out.block_handle and out.block_size without clearing
// (hl_mem_ioctl); the rest of the args keeps the caller's input.
func TestRulesOutputOnlyCalls(t *testing.T) {
	r := newG3Rig(t, Config{}, 0)
	a := hlsys.CBArgs{Handle: r.cqH, Op: hlsys.CBOpInfo, CBSize: 77, CtxID: 5}
	require.NoError(t, hlsys.CommandBuffer(r.b, &a))
	require.Equal(t, hlsys.CBArgs{Handle: 0, Op: hlsys.CBOpInfo, CBSize: 77, CtxID: 5}, a, "usage_cnt 0, input kept")
	a = hlsys.CBArgs{Handle: r.cqH, Op: hlsys.CBOpInfo, CBSize: 77, Flags: hlsys.CBFlagsGetDeviceVA}
	require.NoError(t, hlsys.CommandBuffer(r.b, &a))
	va, err := hlsys.CBDeviceVA(r.b, r.cqH)
	require.NoError(t, err)
	require.Equal(t, hlsys.CBArgs{Handle: va, Op: hlsys.CBOpInfo, CBSize: 77, Flags: hlsys.CBFlagsGetDeviceVA}, a)

	addr, err := gaudi3.ChAMapAddr(1)
	require.NoError(t, err)
	m := hlsys.MemArgs{U: [3]uint64{addr, 0xAAAA_BBBB_CCCC_DDDD, 9}, Op: hlsys.MemOpMapBlock, Flags: 3}
	require.NoError(t, hlsys.Memory(r.b, &m))
	require.NotZero(t, m.U[0])
	require.Equal(t, uint64(0xAAAA_BBBB_0000_0000)|uint64(gaudi3.ChASize), m.U[1], "block_size, pad kept")
	require.Equal(t, uint64(9), m.U[2])
	require.Equal(t, uint32(hlsys.MemOpMapBlock), m.Op)
	require.Equal(t, uint32(3), m.Flags)
}

// TestRulesCustomTimeoutWraps (X13 fixed, R1): hl_cs_ioctl computes a
// custom TDR timeout as msecs_to_jiffies(args->in.timeout * 1000) with a
// u32 product, so 4294968 s wraps to 704 ms and the TDR fires then, not
// in 49 days.
func TestRulesCustomTimeoutWraps(t *testing.T) {
	r := newRig(t, Config{CSTimeout: time.Hour})
	efd := registerEventFD(t, r)
	r.d.HangNextCS(1)
	_, err := r.submit(hlsys.CSFlagsCustomTimeout|hlsys.CSFlagsSkipResetOnTimeout, 4294968, r.chunk(0, nop()))
	require.NoError(t, err)
	waitEvent(t, efd, safety)
	ev, err := hlsys.GetEvents(r.b)
	require.NoError(t, err)
	require.Equal(t, uint64(hlsys.NotifierCSTimeout), ev)
}

// TestRulesKernelCQIndexBound (W12): _hl_interrupt_wait_ioctl bounds the
// counter index by cq_cb->size / 8, the CB's size (the requested size,
// at least a page), not by its page-rounded mapping: in a CB of 5000
// bytes index 624 is the last one, 625 is EINVAL.
func TestRulesKernelCQIndexBound(t *testing.T) {
	r := newG3Rig(t, Config{}, 0)
	h, err := hlsys.CBCreate(r.b, 5000, hlsys.CBFlagsMap)
	require.NoError(t, err)
	out, err := hlsys.WaitForInterruptKernelCQ(r.b, h, 624, 0, g3FirstUserInterrupt, 0)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
	for _, idx := range []uint64{625, 1023} {
		_, err = hlsys.WaitForInterruptKernelCQ(r.b, h, idx, 0, g3FirstUserInterrupt, 0)
		isErrno(t, err, unix.EINVAL)
	}
}

// TestRulesEndedCSDropsParsedCB (C7): a completion slot keeps its ended
// CS until the slot is reused (allocate_cs), 16K of them on Gaudi1; the
// copy of a Gaudi1 kernel CB the emulator parses at submission must not
// live on with it (up to 16K x cb_size bytes held).
func TestRulesEndedCSDropsParsedCB(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi1})
	r.mustRun(cat(nop(), nop(), nop()))
	c := r.b.(*hctx)
	c.csMu.Lock()
	s := c.slots[1&uint64(len(c.slots)-1)]
	c.csMu.Unlock()
	require.NotNil(t, s)
	require.True(t, s.isDone())
	require.Nil(t, s.job0.cb, "the ended CS keeps no copy of its CB")
}

// TestRulesMultiCSPad (W3): hl_multi_cs_wait_ioctl checks its 7 pad
// bytes (after seq_arr_len, in the union with interrupt_timeout_us)
// before anything else: non-zero is EINVAL, on Gaudi2 too, before the
// EPERM of supports_wait_for_multi_cs.
func TestRulesMultiCSPad(t *testing.T) {
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			a := hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Flags: hlsys.WaitCSFlagsMultiCS, InterruptTimeoutUs: 1 | 1<<8}}
			isErrno(t, hlsys.WaitCS(r.b, &a), unix.EINVAL)
			a = hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Flags: hlsys.WaitCSFlagsMultiCS, InterruptTimeoutUs: 1}}
			want := unix.EOPNOTSUPP // Gaudi1 multi-CS waits are not emulated
			if m == ModelGaudi2 {
				want = unix.EPERM
			}
			isErrno(t, hlsys.WaitCS(r.b, &a), want)
		})
	}
}

// TestRulesKernelCQWaitHoldsCB (B9, W12): _hl_interrupt_wait_ioctl holds
// a reference on the counters' CB (hl_cb_get) for the whole wait, so a
// DESTROY meanwhile only drops the handle's reference: the wait keeps
// reading the CB's memory, and the CB (handle, memory, device VA) goes
// with the wait's put. The emulator used to free it under the waiter.
func TestRulesKernelCQWaitHoldsCB(t *testing.T) {
	r := newG3Rig(t, Config{}, 0)
	h, err := hlsys.CBCreate(r.b, 4096, hlsys.CBFlagsMap)
	require.NoError(t, err)
	c := r.b.(*hctx)
	done := make(chan error, 1)
	go func() {
		_, err := hlsys.WaitForInterruptKernelCQ(r.b, h, 0, 1, g3FirstUserInterrupt, 300_000)
		done <- err
	}()
	require.Eventually(t, func() bool { return c.waiting.Load() == 1 }, safety, time.Millisecond)
	require.NoError(t, hlsys.CBDestroy(r.b, h))
	_, err = hlsys.CBDeviceVA(r.b, h)
	require.NoError(t, err, "the wait's reference keeps the handle")
	c.g3Interrupt(g3FirstUserInterrupt) // the waiter reads the counter again
	require.NoError(t, <-done, "the wait timed out (BUSY)")
	_, err = hlsys.CBDeviceVA(r.b, h)
	isErrno(t, err, unix.EINVAL)
}
