package hlsim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// FuzzIoctl drives the emulator's entry points with arbitrary argument
// structs, as a hostile or broken user may write them: the driver
// answers every such call with an errno and stays usable, and so must
// the emulator (no panic, no hang, no error that is not an errno, no
// state the next context inherits).
//
// The input's first byte picks the model (Gaudi1, Gaudi2, Gaudi3); then
// come records, each an op byte and its bytes (zero-padded at the end):
//
//	op&7 0-5: an ioctl of that index (INFO, CB, CS, WAIT_CS, MEMORY,
//	          DEBUG) with the next Sizeof*Args bytes as its argument
//	          struct; op&8 issues it with the other numbering (ENOTTY),
//	          op&0x80 on a goroutine of its own (another thread: those
//	          still running are waited for at the end)
//	op&7 6:   Mmap(offset u64, length u32 % 4 MiB); with op&8, Munmap of
//	          the mapping with index (next byte) instead; with op&0x30
//	          0x10 the context's Close, 0x20 a new context once it is
//	          closed, 0x30 the device's Close (a removal), or with op&0x40
//	          its Reset (a fatal error: the driver's conditional reset)
//	op&7 7:   a 32-bit store (offset u16, value u32) into the mapping
//	          with index (next byte), a Doorbell when it is a Gaudi3
//	          block; with op&8, a store of 32 bytes at offset u16 into
//	          the scratch area instead
//
// User pointers in the structs (CS chunk arrays, INFO return buffers,
// USERPTR host ranges, the WAIT_CS user counter and multi-CS array) are
// fuzz addresses: below fuzzScratch+fuzzGuard they name the harness's
// scratch area (read-write) and the PROT_NONE guard after it, a value in
// [fuzzScratch+fuzzGuard, 2^47) is folded into that range, and the rest
// (the first 64 KiB, which nothing maps, and non-user addresses) is used
// as written. The emulator's user copies so never reach memory of the
// test process other than the scratch area: the driver, too, writes
// wherever the user points it. A USERPTR range that would run past the
// guard into other mappings is cut at its end. Waits are bounded
// (fuzzWaitUs) so that no input blocks.
//
// After the records the harness closes the context and checks that the
// device is operational again, that no user mapping is left, and that a
// new context starts clean (all DRAM free) and works (after a device
// Close: that the context's Close leaves no mapping).
func FuzzIoctl(f *testing.F) {
	for _, s := range fuzzIoctlSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 || len(in) > 4096 {
			return
		}
		// A hang is a defect too, which the fuzzer would not report
		// (watchHang).
		hang := watchHang(t, "FuzzIoctl", in)
		defer hang.stop()
		h := newFuzzIoctl(t, fuzzConfig(in[0]))
		hang.setUnblock(func() { _ = h.r.d.Close() })
		h.r.hangBy = hang.deadline
		in = in[1:]
		for len(in) > 0 {
			op := in[0]
			in = in[1:]
			in = h.do(op, in)
		}
		h.after()
	})
}

const (
	fuzzScratch = 64 << 10
	fuzzGuard   = 1 << 20
	fuzzWaitUs  = 20_000
	fuzzMaxMmap = 4 << 20
	userTop     = 1 << 47
)

type fuzzIoctl struct {
	t       *testing.T
	r       *rig
	region  []byte // scratch, then the guard
	args    []byte // argument structs, 64 bytes each (mmap memory: it never moves)
	nextArg int
	maps    [][]byte
	wg      sync.WaitGroup // async ioctls
	mu      sync.Mutex     // guards what follows (async ioctls)
	exports []int
	errs    []string // async ioctls' failures

	ctxClosed, devClosed bool
	lastErr              error // of the last synchronous ioctl
}

// fuzzArgSlots is how many argument structs may be in use at once (one
// per async ioctl still running, the oldest reused first).
const fuzzArgSlots = 64

// fuzzConfig is the device the input's first byte picks: the model (its
// value mod 3: Gaudi1, Gaudi2, Gaudi3), the kernel generation ((b/3)%4:
// the default, 6.1, 6.6, 6.7; Gaudi3 keeps the default, which its driver
// needs) and with bit 7 Config.HeldExports.
func fuzzConfig(b byte) Config {
	cfg := Config{Model: Model(b%3) + ModelGaudi1, DRAMSize: 64 << 20, HeldExports: b&0x80 != 0}
	if cfg.Model != ModelGaudi3 {
		cfg.Kernel = []string{"", "6.1", "6.6", "6.7"}[(b&0x7F)/3%4]
	}
	return cfg
}

func newFuzzIoctl(t *testing.T, cfg Config) *fuzzIoctl {
	region, err := unix.Mmap(-1, 0, fuzzScratch+fuzzGuard, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	// Unmapped after the device is closed (cleanups run last first): its
	// engines may still move bytes of the scratch area until then.
	t.Cleanup(func() { _ = unix.Munmap(region) })
	require.NoError(t, unix.Mprotect(region[fuzzScratch:], unix.PROT_NONE))
	h := &fuzzIoctl{t: t, region: region, args: outBuf(t, 64*fuzzArgSlots)}
	h.r = newRig(t, cfg)
	t.Cleanup(func() {
		h.wg.Wait()
		h.closeExports()
	})
	return h
}

// closeExports closes the DMA-BUF fds the input exported.
func (h *fuzzIoctl) closeExports() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, fd := range h.exports {
		_ = unix.Close(fd)
	}
	h.exports = nil
}

// ptr turns a fuzz address into the address the call gets.
func (h *fuzzIoctl) ptr(v uint64) uint64 {
	base := addrOf(h.region)
	switch {
	case v < fuzzScratch+fuzzGuard:
		return base + v
	case v < userTop:
		return base + v%(fuzzScratch+fuzzGuard)
	}
	return v
}

// take returns the next n bytes of in (zero-padded) and the rest.
func take(in []byte, n int) ([]byte, []byte) {
	b := make([]byte, n)
	k := copy(b, in)
	return b, in[k:]
}

func (h *fuzzIoctl) do(op byte, in []byte) []byte {
	b := h.r.b
	switch nr := int(op & 7); nr {
	case 6:
		switch op & 0x30 {
		case 0x10: // the context's Close (the fd closed)
			h.checkErr("close", b.Close())
			h.ctxClosed = true
			h.maps = nil // Close undid them (hlsys.Backend)
			return in
		case 0x20: // a new context, once the old one is closed
			if h.ctxClosed && !h.devClosed {
				nb, err := h.r.d.open()
				h.checkErr("open", err)
				if err == nil {
					h.t.Cleanup(func() { _ = nb.Close() })
					h.r.b, h.ctxClosed = nb, false
				}
			}
			return in
		case 0x30:
			if op&0x40 != 0 {
				h.r.d.Reset() // a fatal device error: the driver's conditional reset
				return in
			}
			// The device removed (its mappings stay: RULES D12).
			require.NoError(h.t, h.r.d.Close())
			h.devClosed = true
			return in
		}
		if op&8 != 0 {
			var i []byte
			i, in = take(in, 1)
			if len(h.maps) > 0 {
				k := int(i[0]) % len(h.maps)
				h.checkErr("munmap", b.Munmap(h.maps[k]))
				h.maps = append(h.maps[:k], h.maps[k+1:]...)
			}
			return in
		}
		var a []byte
		a, in = take(in, 12)
		m, err := b.Mmap(int64(binary.LittleEndian.Uint64(a)), int(binary.LittleEndian.Uint32(a[8:])%fuzzMaxMmap))
		h.checkErr("mmap", err)
		if err == nil {
			h.maps = append(h.maps, m)
		}
		return in
	case 7:
		if op&8 != 0 {
			var a []byte
			a, in = take(in, 2+32)
			off := int(binary.LittleEndian.Uint16(a)) % (fuzzScratch - 32)
			copy(h.region[off:], a[2:])
			return in
		}
		var a []byte
		a, in = take(in, 7)
		if len(h.maps) == 0 {
			return in
		}
		m := h.maps[int(a[0])%len(h.maps)]
		off := int(binary.LittleEndian.Uint16(a[1:])) % len(m) &^ 3
		atomicStore32(m[off:], binary.LittleEndian.Uint32(a[3:]))
		if db, ok := b.(interface{ Doorbell([]byte) }); ok {
			db.Doorbell(m)
		}
		return in
	default:
		size := []int{hlsys.SizeofInfoArgs, hlsys.SizeofCBArgs, hlsys.SizeofCSArgs,
			hlsys.SizeofWaitCSArgs, hlsys.SizeofMemArgs, hlsys.SizeofDebugArgs}[nr]
		var a []byte
		a, in = take(in, size)
		slot := h.args[64*h.nextArg : 64*(h.nextArg+1)]
		h.nextArg = (h.nextArg + 1) % fuzzArgSlots
		if h.nextArg == 0 {
			h.wg.Wait() // the slots are used again: no async call may hold one
		}
		clear(slot)
		copy(slot, a)
		arg := unsafe.Pointer(&slot[0])
		h.fix(nr, arg)
		export := nr == hlsys.IoctlMemory && (*hlsys.MemArgs)(arg).Op == hlsys.MemOpExportDMABuf
		num := b.(*hctx).Numbering()
		if op&8 != 0 {
			if num == hlsys.Accel {
				num = hlsys.Legacy
			} else {
				num = hlsys.Accel
			}
		}
		call := func() {
			err := b.Ioctl(num.Request(nr), arg)
			if op&0x80 == 0 {
				h.lastErr = err
			}
			if msg := errMsg("ioctl", err); msg != "" {
				h.mu.Lock()
				h.errs = append(h.errs, msg)
				h.mu.Unlock()
			}
			if fd := (*hlsys.MemArgs)(arg).OutFD(); err == nil && export && fd >= 0 {
				h.mu.Lock()
				h.exports = append(h.exports, int(fd))
				h.mu.Unlock()
			}
		}
		if op&0x80 != 0 {
			// Another thread of the process: the driver serves
			// concurrent ioctls on one fd.
			h.wg.Go(call)
			return in
		}
		// A refused MEMORY call leaves the memory as it was (no async
		// call may change it meanwhile).
		if nr == hlsys.IoctlMemory {
			h.wg.Wait()
		}
		before, uerr := hlsys.GetDramUsage(b)
		call()
		h.report()
		if after, err := hlsys.GetDramUsage(b); nr == hlsys.IoctlMemory && uerr == nil && err == nil &&
			after != before && (h.lastErr != nil) {
			h.t.Fatalf("MEMORY op %d refused (%v), DRAM usage %+v -> %+v", (*hlsys.MemArgs)(unsafe.Pointer(&a[0])).Op, h.lastErr, before, after)
		}
		return in
	}
}

// fix rewrites the user pointers of an argument struct (see FuzzIoctl)
// and bounds its waits.
func (h *fuzzIoctl) fix(nr int, arg unsafe.Pointer) {
	switch nr {
	case hlsys.IoctlInfo:
		a := (*hlsys.InfoArgs)(arg)
		a.ReturnPointer = h.ptr(a.ReturnPointer)
	case hlsys.IoctlCS:
		a := (*hlsys.CSArgs)(arg)
		a.In.ChunksRestore = h.ptr(a.In.ChunksRestore)
		a.In.ChunksExecute = h.ptr(a.In.ChunksExecute)
	case hlsys.IoctlWaitCS:
		a := (*hlsys.WaitCSArgs)(arg)
		intr := a.In.Flags&hlsys.WaitCSFlagsInterrupt != 0
		if intr && a.In.Flags&hlsys.WaitCSFlagsInterruptKernelCQ == 0 || a.In.Flags&hlsys.WaitCSFlagsMultiCS != 0 {
			a.In.Seq = h.ptr(a.In.Seq)
		}
		switch {
		case intr:
			a.In.InterruptTimeoutUs %= fuzzWaitUs + 1
		case a.In.Flags&hlsys.WaitCSFlagsMultiCS == 0:
			a.In.TimeoutUs %= fuzzWaitUs + 1
		}
	case hlsys.IoctlMemory:
		a := (*hlsys.MemArgs)(arg)
		if a.Op == hlsys.MemOpMap && a.Flags&hlsys.MemUserPtr != 0 {
			a.U[0] = h.ptr(a.U[0])
			end := addrOf(h.region) + fuzzScratch + fuzzGuard
			if a.U[0] < end && a.U[0]+a.U[2] > end && a.U[0]+a.U[2] < userTop {
				a.U[2] = end - a.U[0] // it would run past the guard
			}
		}
	}
}

// errMsg describes an error the driver's ioctl, mmap or close could not
// return: anything but an errno, or the os.ErrClosed of a closed
// context (hlsys.Backend). "" for a good one.
func errMsg(what string, err error) string {
	var e unix.Errno
	if err == nil || errors.As(err, &e) || errors.Is(err, os.ErrClosed) {
		return ""
	}
	return fmt.Sprintf("%s: %T %v is not an errno", what, err, err)
}

func (h *fuzzIoctl) checkErr(what string, err error) {
	if msg := errMsg(what, err); msg != "" {
		h.t.Fatal(msg)
	}
}

// report fails on what the async ioctls reported.
func (h *fuzzIoctl) report() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) > 0 {
		h.t.Fatal(h.errs)
	}
}

// after closes the context and checks that the device is sound: the
// release undoes every mapping, the device is operational (a reset the
// input caused is over) and a new context starts clean and runs work.
func (h *fuzzIoctl) after() {
	h.wg.Wait()
	h.report()
	// The process lets go of its exports (a context they hold,
	// Config.HeldExports, is released then).
	h.closeExports()
	if h.devClosed {
		// Removed: the context's Close undoes the mappings left to it.
		require.NoError(h.t, h.r.b.Close())
		require.Zero(h.t, h.r.d.Stats().UserMappings, "the release left user mappings")
		return
	}
	fuzzAfter(h.t, h.r)
}

// fuzzAfter closes r's context and checks the device is sound (see
// FuzzIoctl).
func fuzzAfter(t *testing.T, r *rig) {
	require.NoError(t, r.b.Close())
	require.Zero(t, r.d.Stats().UserMappings, "the release left user mappings")
	deadline := time.Now().Add(safety)
	if !r.hangBy.IsZero() && r.hangBy.Before(deadline) {
		deadline = r.hangBy
	}
	for r.d.status.Load() != hlsys.DeviceStatusOperational {
		if time.Now().After(deadline) {
			t.Fatalf("device status %d after the context's release", r.d.status.Load())
		}
		time.Sleep(time.Millisecond)
	}
	var b hlsys.Backend
	for {
		var err error
		if b, err = r.d.open(); err == nil {
			break
		}
		if !errors.Is(err, unix.EAGAIN) || time.Now().After(deadline) {
			t.Fatalf("open after the fuzzed context: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(func() { _ = b.Close() })
	u, err := hlsys.GetDramUsage(b)
	require.NoError(t, err)
	require.Equal(t, r.info.DramSize, u.DramFreeMem, "the new context inherits used DRAM")
	r2 := &rig{t: t, d: r.d, b: b, g1: r.g1, g1Next: r.info.DramBaseAddress, info: r.info}
	if r.d.amap.gaudi3 {
		ch, err := gaudi3.ChAMapAddr(1)
		require.NoError(t, err)
		_, _, err = hlsys.MemMapBlock(b, ch)
		require.NoError(t, err)
		return
	}
	src, sva := r2.host(4096)
	dst, dva := r2.host(4096)
	copy(src, pattern(4096, 3))
	r2.mustRun(linDMA(r2.g1, dva, sva, 4096))
	require.Equal(t, src, dst)
}

// atomicStore32 is a register store (a channel's worker reads the
// block's registers atomically).
func atomicStore32(b []byte, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[0])), v)
}

// fuzzRec encodes one record: op and the bytes of v (a struct or []byte).
func fuzzRec(op byte, v any) []byte {
	var b []byte
	switch v := v.(type) {
	case []byte:
		b = v
	case *hlsys.InfoArgs:
		b = unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
	case *hlsys.CBArgs:
		b = unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
	case *hlsys.CSArgs:
		b = unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
	case *hlsys.WaitCSArgs:
		b = unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
	case *hlsys.MemArgs:
		b = unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
	case *hlsys.CSChunk:
		b = unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
	default:
		panic("fuzzRec: unknown type")
	}
	return append([]byte{op}, b...)
}

// fuzzScratchWrite records stores of p at scratch offset off, 32 bytes a
// record.
func fuzzScratchWrite(off int, p []byte) []byte {
	var out []byte
	for i := 0; i < len(p); i += 32 {
		chunk := make([]byte, 34)
		binary.LittleEndian.PutUint16(chunk, uint16(off+i))
		copy(chunk[2:], p[i:min(len(p), i+32)])
		out = append(out, fuzzRec(7|8, chunk)...)
	}
	return out
}

// fuzzStore records a 32-bit store at off of mapping idx.
func fuzzStore(idx byte, off uint16, v uint32) []byte {
	b := make([]byte, 7)
	b[0] = idx
	binary.LittleEndian.PutUint16(b[1:], off)
	binary.LittleEndian.PutUint32(b[3:], v)
	return fuzzRec(7, b)
}

func fuzzMmap(off uint64, n uint32) []byte {
	b := make([]byte, 12)
	binary.LittleEndian.PutUint64(b, off)
	binary.LittleEndian.PutUint32(b[8:], n)
	return fuzzRec(6, b)
}

// fuzzIoctlSeeds are the calls gxfer and the driver tests make, per model,
// as FuzzIoctl records. The values a fresh device hands out (the VA of
// the scratch area's USERPTR mapping, the first CB handle) are read from
// a throwaway device of the same model.
func fuzzIoctlSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, m := range []Model{ModelGaudi1, ModelGaudi2, ModelGaudi3} {
		r := newRig(f, Config{Model: m, DRAMSize: 64 << 20})
		scratch := hostMem(f, fuzzScratch)
		va, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&scratch[0]), fuzzScratch, 0, 0)
		require.NoError(f, err)
		cbh, err := hlsys.CBCreate(r.b, 4096, 0)
		require.NoError(f, err)
		sel := []byte{byte(m - ModelGaudi1)}
		mapScratch := fuzzRec(4, &hlsys.MemArgs{U: [3]uint64{0, 0, fuzzScratch}, Op: hlsys.MemOpMap, Flags: hlsys.MemUserPtr})
		wait := func(seq uint64) []byte {
			return fuzzRec(3, &hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: seq, TimeoutUs: fuzzWaitUs}})
		}
		cat2 := func(ps ...[]byte) []byte { return cat(append([][]byte{sel}, ps...)...) }

		// INFO ops into the scratch area, the events and an eventfd.
		seeds = append(seeds, cat2(
			fuzzRec(0, &hlsys.InfoArgs{ReturnPointer: 0x100, ReturnSize: 304, Op: hlsys.InfoHwIPInfo}),
			fuzzRec(0, &hlsys.InfoArgs{ReturnPointer: 0x100, ReturnSize: 16, Op: hlsys.InfoDramUsage}),
			fuzzRec(0, &hlsys.InfoArgs{ReturnPointer: 0x100, ReturnSize: 40, Op: hlsys.InfoHwIdle}),
			fuzzRec(0, &hlsys.InfoArgs{ReturnPointer: 0x100, ReturnSize: 8, Op: hlsys.InfoGetEvents}),
			fuzzRec(0, &hlsys.InfoArgs{ReturnPointer: fuzzScratch - 4, ReturnSize: 304, Op: hlsys.InfoHwIPInfo}),
			fuzzRec(0, &hlsys.InfoArgs{Op: hlsys.InfoRegisterEventFD, Arg: 0xFFFFFFFF}),
			fuzzRec(0|8, &hlsys.InfoArgs{ReturnPointer: 0x100, ReturnSize: 16, Op: hlsys.InfoDramUsage}),
		))
		// CB lifecycle, mapped to the device on Gaudi2/3, and its mmap.
		seeds = append(seeds, cat2(
			fuzzRec(1, &hlsys.CBArgs{Op: hlsys.CBOpCreate, CBSize: 4096, Flags: hlsys.CBFlagsMap}),
			fuzzRec(1, &hlsys.CBArgs{Op: hlsys.CBOpCreate, CBSize: 100}),
			fuzzRec(1, &hlsys.CBArgs{Op: hlsys.CBOpInfo, Handle: cbh, Flags: hlsys.CBFlagsGetDeviceVA}),
			fuzzMmap(cbh, 4096),
			fuzzRec(1, &hlsys.CBArgs{Op: hlsys.CBOpDestroy, Handle: cbh}),
			fuzzStore(0, 8, 1),
			fuzzRec(1, &hlsys.CBArgs{Op: hlsys.CBOpInfo, Handle: cbh}),
			fuzzRec(6|8, []byte{0}),
		))
		// Device memory: alloc, map, export, unmap, free.
		seeds = append(seeds, cat2(
			fuzzRec(4, &hlsys.MemArgs{U: [3]uint64{1 << 20}, Op: hlsys.MemOpAlloc}),
			fuzzRec(4, &hlsys.MemArgs{U: [3]uint64{0, 1}, Op: hlsys.MemOpMap}),
			fuzzRec(4, &hlsys.MemArgs{U: [3]uint64{r.info.DramBaseAddress, 1 << 20}, Op: hlsys.MemOpExportDMABuf, Flags: unix.O_RDWR | unix.O_CLOEXEC}),
			fuzzRec(4, &hlsys.MemArgs{U: [3]uint64{r.info.DramBaseAddress}, Op: hlsys.MemOpUnmap}),
			fuzzRec(4, &hlsys.MemArgs{U: [3]uint64{1}, Op: hlsys.MemOpFree}),
			mapScratch,
		))
		// Lifecycle: a CB mapped, a wait from another thread, the
		// context closed and reopened, the device removed under the
		// new one with a mapping left.
		seeds = append(seeds, cat2(
			fuzzRec(1, &hlsys.CBArgs{Op: hlsys.CBOpCreate, CBSize: 4096}),
			fuzzMmap(cbh, 4096),
			fuzzRec(3|0x80, &hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: 0, TimeoutUs: fuzzWaitUs}}),
			fuzzRec(0|0x80, &hlsys.InfoArgs{ReturnPointer: 0x100, ReturnSize: 16, Op: hlsys.InfoDramUsage}),
			[]byte{6 | 0x10}, []byte{6 | 0x20},
			[]byte{6 | 0x70},
			fuzzRec(0, &hlsys.InfoArgs{ReturnPointer: 0x100, ReturnSize: 4, Op: hlsys.InfoDeviceStatus}),
			[]byte{6 | 0x10}, []byte{6 | 0x20},
			fuzzRec(1, &hlsys.CBArgs{Op: hlsys.CBOpCreate, CBSize: 4096}),
			fuzzMmap(cbh, 4096),
			[]byte{6 | 0x30},
			fuzzStore(0, 0, 1),
			fuzzRec(1, &hlsys.CBArgs{Op: hlsys.CBOpInfo, Handle: cbh}),
			fuzzRec(6|8, []byte{0}),
		))
		switch m {
		case ModelGaudi1, ModelGaudi2:
			// A CS copying within the scratch area, and its waits.
			pkt := cat(linDMA(m == ModelGaudi1, va+0x3000, va+0x2000, 256), nop())
			chunk := hlsys.CSChunk{CBHandle: va + 0x1000, CBSize: uint32(len(pkt)), Flags: hlsys.CSChunkFlagsUserAllocCB}
			var cbRecs []byte
			if m == ModelGaudi1 {
				chunk = hlsys.CSChunk{CBHandle: cbh, CBSize: uint32(len(pkt))}
				cbRecs = cat(fuzzRec(1, &hlsys.CBArgs{Op: hlsys.CBOpCreate, CBSize: 4096}), fuzzMmap(cbh, 4096))
				for i := 0; i < len(pkt); i += 4 {
					cbRecs = append(cbRecs, fuzzStore(0, uint16(i), binary.LittleEndian.Uint32(pkt[i:]))...)
				}
			}
			cs := &hlsys.CSArgs{In: hlsys.CSIn{ChunksExecute: 0x800, NumChunksExecute: 1, CSFlags: hlsys.CSFlagsTimestamp}}
			seeds = append(seeds, cat2(mapScratch, cbRecs,
				fuzzScratchWrite(0x1000, pkt),
				fuzzScratchWrite(0x800, unsafe.Slice((*byte)(unsafe.Pointer(&chunk)), unsafe.Sizeof(chunk))),
				fuzzRec(2, cs), wait(1), fuzzRec(2, cs), fuzzRec(2, cs), wait(2), wait(0), wait(7),
				fuzzRec(3, &hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: 0x800, Flags: hlsys.WaitCSFlagsMultiCS, InterruptTimeoutUs: 2}}),
			))
		case ModelGaudi3:
			// A channel block, mapped and programmed, and the waits on
			// its interrupt.
			addr, err := gaudi3.ChAMapAddr(1)
			require.NoError(f, err)
			bh, _, err := hlsys.MemMapBlock(r.b, addr)
			require.NoError(f, err)
			intr := uint32(g3FirstUserInterrupt) << hlsys.WaitCSFlagsInterruptShift
			seeds = append(seeds, cat2(mapScratch,
				fuzzRec(4, &hlsys.MemArgs{U: [3]uint64{addr}, Op: hlsys.MemOpMapBlock}),
				fuzzMmap(bh, gaudi3.ChASize),
				fuzzStore(0, gaudi3.RegDescSubmitFifoCfg, gaudi3.FifoCfgMSQ),
				fuzzStore(0, gaudi3.RegMSQBaseLo, uint32(va)),
				fuzzStore(0, gaudi3.RegMSQBaseHi, uint32(va>>32)),
				fuzzStore(0, gaudi3.RegMSQSize, 4096-1),
				fuzzStore(0, gaudi3.RegECQBaseLo, uint32(va+0x2000)),
				fuzzStore(0, gaudi3.RegECQBaseHi, uint32((va+0x2000)>>32)),
				fuzzStore(0, gaudi3.RegMSQPI, 64),
				fuzzRec(1, &hlsys.CBArgs{Op: hlsys.CBOpCreate, CBSize: 4096, Flags: hlsys.CBFlagsMap}),
				fuzzRec(3, &hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: cbh, Flags: hlsys.WaitCSFlagsInterrupt | hlsys.WaitCSFlagsInterruptKernelCQ | intr}}),
				fuzzRec(3, &hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: 0x10, TimeoutUs: 1, InterruptTimeoutUs: 1000, Flags: hlsys.WaitCSFlagsInterrupt | intr}}),
				fuzzRec(3, &hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: 0x10, TimeoutUs: 1, InterruptTimeoutUs: 1000, Flags: hlsys.WaitCSFlagsInterrupt | hlsys.WaitCSFlagsAnyCQInterrupt}}),
			))
		}
	}
	// The Gaudi2 calls on the older kernels (6.1's {handle, size}
	// export and legacy numbering, 6.6's export) and with exports that
	// hold the context; 6.1 exports by handle.
	for _, s := range seeds {
		if s[0] != byte(ModelGaudi2-ModelGaudi1) {
			continue
		}
		for _, sel := range []byte{1 + 3, 1 + 6, 1 | 0x80} {
			seeds = append(seeds, append([]byte{sel}, s[1:]...))
		}
	}
	seeds = append(seeds, cat([]byte{1 + 3},
		fuzzRec(4, &hlsys.MemArgs{U: [3]uint64{1 << 20}, Op: hlsys.MemOpAlloc}),
		fuzzRec(4, &hlsys.MemArgs{U: [3]uint64{1, 1 << 20}, Op: hlsys.MemOpExportDMABuf, Flags: unix.O_RDWR | unix.O_CLOEXEC}),
		fuzzRec(4, &hlsys.MemArgs{U: [3]uint64{1}, Op: hlsys.MemOpFree}),
		[]byte{6 | 0x10}, []byte{6 | 0x20}))
	return seeds
}
