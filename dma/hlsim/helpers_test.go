package hlsim

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// safety is the generous upper bound for any blocking wait in tests (a
// net against hangs, never a performance assertion).
const safety = 20 * time.Second

var models = []Model{ModelGaudi1, ModelGaudi2}

// Packets, encoded by hand from the bit tables (gaudi-uapi.md section 7),
// independently of the emulator's decoder.
const (
	ctlLinDMA  = 0x9 << 24
	ctlNOP     = 0xA << 24
	ctlEB      = 1 << 29
	ctlRB      = 1 << 30
	ctlMB      = 1 << 31
	ctlLin     = 1 << 3 // Gaudi1 LIN_DMA lin
	ctlMemSet  = 1 << 4
	ctlMsgProt = 0x7 << 24
	ctlCPDMA   = 0x5 << 24
	ctlStop    = 0xB << 24
	ctlWReg32  = 0x1 << 24
)

// linDMA encodes a 24-byte LIN_DMA: tsize @0, ctl @4, src @8, dst @16.
func linDMA(g1 bool, dst, src uint64, n uint32) []byte {
	ctl := uint32(ctlLinDMA | ctlMB)
	if g1 {
		ctl |= ctlRB | ctlLin
	}
	return linDMACtl(ctl, dst, src, n)
}

func linDMACtl(ctl uint32, dst, src uint64, n uint32) []byte {
	p := make([]byte, 24)
	binary.LittleEndian.PutUint32(p[0:], n)
	binary.LittleEndian.PutUint32(p[4:], ctl)
	binary.LittleEndian.PutUint64(p[8:], src)
	binary.LittleEndian.PutUint64(p[16:], dst)
	return p
}

// memsetPkt is a LIN_DMA with mem_set: src_addr holds the fill value.
func memsetPkt(g1 bool, dst, value uint64, n uint32) []byte {
	p := linDMA(g1, dst, value, n)
	ctl := binary.LittleEndian.Uint32(p[4:]) | ctlMemSet
	binary.LittleEndian.PutUint32(p[4:], ctl)
	return p
}

// pkt8 is an 8-byte packet with the given ctl word.
func pkt8(ctl uint32) []byte {
	p := make([]byte, 8)
	binary.LittleEndian.PutUint32(p[4:], ctl)
	return p
}

func nop() []byte { return pkt8(ctlNOP | ctlEB | ctlMB) }

func cat(ps ...[]byte) []byte {
	var b []byte
	for _, p := range ps {
		b = append(b, p...)
	}
	return b
}

// rig is one emulated device with an open context and helpers to get
// memory and to run CBs.
type rig struct {
	t      testing.TB
	d      *Device
	b      hlsys.Backend
	g1     bool
	g1Next uint64 // Gaudi1: next free physical DRAM address
	info   hlsys.HwIPInfo
	hangBy time.Time // a fuzz input in a worker: its hang watch's deadline, where fuzzAfter's waits end
}

func newRig(t testing.TB, cfg Config) *rig {
	t.Helper()
	if cfg.Kill == nil {
		// A hard reset with the context open must not SIGKILL the test
		// binary: tests that expect a kill read Stats.Kills (the real
		// SIGKILL is TestKillsProcess's, in a child process).
		cfg.Kill = func() {}
	}
	d, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	b, err := d.open()
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	info, err := hlsys.GetHwIPInfo(b)
	require.NoError(t, err)
	return &rig{t: t, d: d, b: b, g1: d.Model() == ModelGaudi1, g1Next: info.DramBaseAddress, info: info}
}

// hostMem maps n bytes of anonymous memory, unmapped at cleanup.
func hostMem(t testing.TB, n int) []byte {
	t.Helper()
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(m) })
	return m
}

// smallPageMem is hostMem whose 4 KiB pages none starts on a 2 MiB
// boundary. mmap returns such a boundary now and then, and a mapping from
// there needs a 2 MiB-aligned device VA (mapHost): tests of VA hints
// would then fail by chance.
func smallPageMem(t testing.TB, n int) []byte {
	t.Helper()
	for range 8 {
		m := hostMem(t, n) // a failed try stays mapped: the next differs
		first := uintptr(unsafe.Pointer(&m[0]))
		if (first+uintptr(n)-1)/hugePageSize == first/hugePageSize && first%hugePageSize != 0 {
			return m
		}
	}
	t.Fatal("no small-page-only host range in 8 tries")
	return nil
}

// host returns n bytes of host memory mapped into the device (USERPTR).
func (r *rig) host(n int) ([]byte, uint64) {
	r.t.Helper()
	m := hostMem(r.t, n)
	va, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&m[0]), uint64(n), 0, 0)
	require.NoError(r.t, err)
	return m, va
}

// dram returns the device address of n bytes of DRAM.
func (r *rig) dram(n uint64) uint64 {
	r.t.Helper()
	if r.g1 {
		_, err := hlsys.MemAlloc(r.b, n, 0, 0) // accounting
		require.NoError(r.t, err)
		a := r.g1Next
		r.g1Next += (n + 4095) &^ 4095
		return a
	}
	h, err := hlsys.MemAlloc(r.b, n, 0, 0)
	require.NoError(r.t, err)
	va, err := hlsys.MemMapDevice(r.b, h, 0, 0)
	require.NoError(r.t, err)
	return va
}

// chunk puts cb into a new command buffer and returns its chunk on queue
// q: a kernel CB on Gaudi1, a USERPTR-mapped user CB on Gaudi2.
func (r *rig) chunk(q uint32, cb []byte) hlsys.CSChunk {
	r.t.Helper()
	size := max(len(cb), 8)
	if r.g1 {
		h, err := hlsys.CBCreate(r.b, uint32(size), 0)
		require.NoError(r.t, err)
		m, err := r.b.Mmap(int64(h), (size+4095)&^4095)
		require.NoError(r.t, err)
		copy(m, cb)
		return hlsys.CSChunk{CBHandle: h, QueueIndex: q, CBSize: uint32(len(cb))}
	}
	m, va := r.host((size + 4095) &^ 4095)
	copy(m, cb)
	return hlsys.CSChunk{CBHandle: va, QueueIndex: q, CBSize: uint32(len(cb)), Flags: hlsys.CSChunkFlagsUserAllocCB}
}

// submit submits one CS of the given chunks.
func (r *rig) submit(flags, timeoutSec uint32, chunks ...hlsys.CSChunk) (uint64, error) {
	out, err := hlsys.SubmitCS(r.b, nil, chunks, flags, timeoutSec)
	return out.Seq, err
}

// run submits cb on queue 0 and waits for the CS.
func (r *rig) run(cb []byte) (hlsys.WaitCSOut, error) {
	r.t.Helper()
	seq, err := r.submit(0, 0, r.chunk(0, cb))
	require.NoError(r.t, err)
	return hlsys.WaitForCS(r.b, seq, uint64(safety/time.Microsecond))
}

// mustRun runs cb and requires COMPLETED.
func (r *rig) mustRun(cb []byte) {
	r.t.Helper()
	out, err := r.run(cb)
	require.NoError(r.t, err)
	require.Equal(r.t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
}

// isErrno checks that err wraps errno.
func isErrno(t testing.TB, err error, errno unix.Errno) {
	t.Helper()
	require.Error(t, err)
	require.Truef(t, errors.Is(err, errno), "want %v, got %v", errno, err)
}

// outBuf returns n bytes of mmap memory for an ioctl's user buffer: a
// uint64 address in an ioctl struct must not point into a goroutine
// stack, which may move while the (in-process) emulator runs.
func outBuf(t testing.TB, n int) []byte {
	t.Helper()
	return hostMem(t, (n+4095)&^4095)[:n]
}

// addrOf is the address of b's first byte as the uint64 the uAPI takes.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}
