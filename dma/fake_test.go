package dma

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// fakeBackend is a scripted hlsys.Backend for tests that need exact
// control of the driver's answers (errno mapping, argument forms). It
// executes nothing.
type fakeBackend struct {
	num  hlsys.Numbering
	name string

	mu       sync.Mutex
	info     hlsys.HwIPInfo
	status   uint32
	closed   int
	nextH    uint64
	nextVA   uint64
	mems     []hlsys.MemArgs // every MEMORY call, in order
	cbs      []hlsys.CBArgs
	csChunks [][]hlsys.CSChunk
	seq      uint64

	// Optional hooks; nil means a default answer.
	submit func(chunks []hlsys.CSChunk) (uint64, error)
	wait   func(seq, timeoutUs uint64) (hlsys.WaitCSOut, error)
	memErr func(a *hlsys.MemArgs) error
}

func newFake(model Model, num hlsys.Numbering) *fakeBackend {
	f := &fakeBackend{num: num, name: "fake0", nextH: 1, nextVA: 0x1000_0000_0000}
	switch model {
	case ModelGaudi1:
		f.info.DeviceID = hlsys.DeviceIDGaudi
		f.info.DramBaseAddress = 0x20_0000_0000
		f.info.DramSize = 64 << 20
		f.info.DramPageSize = 2 << 20
		f.info.SramBaseAddress = 0x7ff_0000_0000
		f.info.SramSize = 1 << 20
	case ModelGaudi2:
		f.info.DeviceID = hlsys.DeviceIDGaudi2
		f.info.DramBaseAddress = 0x1001_0000_0000
		f.info.DramSize = 1 << 30
		f.info.DramPageSize = 48 << 20 // not a power of 2, like the real one
		f.info.DeviceMemAllocDefaultPageSize = 48 << 20
	case ModelGaudi3:
		f.info.DeviceID = hlsys.DeviceIDGaudi3
		f.info.DramSize = 1 << 30
		f.info.DeviceMemAllocDefaultPageSize = 2 << 20
	}
	return f
}

// fakeRelease adds KernelRelease to a fakeBackend.
type fakeRelease struct {
	*fakeBackend
	rel string
}

func (f fakeRelease) KernelRelease() string { return f.rel }

func (f *fakeBackend) Numbering() hlsys.Numbering { return f.num }
func (f *fakeBackend) Name() string               { return f.name }
func (f *fakeBackend) Emulated() bool             { return true }

func (f *fakeBackend) Close() error {
	f.mu.Lock()
	f.closed++
	f.mu.Unlock()
	return nil
}

func (f *fakeBackend) closeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

func (f *fakeBackend) Mmap(offset int64, length int) ([]byte, error) {
	return make([]byte, length), nil
}
func (f *fakeBackend) Munmap(b []byte) error { return nil }

// ptrField reinterprets a __u64 user-pointer field as a pointer.
func ptrField(p *uint64) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(p)) }

func (f *fakeBackend) Ioctl(req uintptr, arg unsafe.Pointer) error {
	n, nr, ok := hlsys.Decode(req)
	if !ok || n != f.num {
		return unix.ENOTTY
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch nr {
	case hlsys.IoctlInfo:
		a := (*hlsys.InfoArgs)(arg)
		dst := unsafe.Slice((*byte)(ptrField(&a.ReturnPointer)), a.ReturnSize)
		var src []byte
		switch a.Op {
		case hlsys.InfoHwIPInfo:
			src = unsafe.Slice((*byte)(unsafe.Pointer(&f.info)), unsafe.Sizeof(f.info))
		case hlsys.InfoDeviceStatus:
			st := hlsys.DeviceStatus{Status: f.status}
			src = unsafe.Slice((*byte)(unsafe.Pointer(&st)), unsafe.Sizeof(st))
		case hlsys.InfoDramUsage:
			du := hlsys.DramUsage{DramFreeMem: f.info.DramSize}
			src = unsafe.Slice((*byte)(unsafe.Pointer(&du)), unsafe.Sizeof(du))
		default:
			return unix.EINVAL
		}
		copy(dst, src)
		return nil
	case hlsys.IoctlMemory:
		a := (*hlsys.MemArgs)(arg)
		f.mems = append(f.mems, *a)
		if f.memErr != nil {
			if err := f.memErr(a); err != nil {
				return err
			}
		}
		switch a.Op {
		case hlsys.MemOpAlloc:
			if f.info.DeviceID == hlsys.DeviceIDGaudi {
				a.U = [3]uint64{0}
			} else {
				a.U = [3]uint64{f.nextH}
				f.nextH++
			}
		case hlsys.MemOpMap:
			a.U = [3]uint64{f.nextVA}
			f.nextVA += 1 << 30
		case hlsys.MemOpExportDMABuf:
			efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
			if err != nil {
				return err
			}
			a.U = [3]uint64{uint64(uint32(efd))}
		}
		return nil
	case hlsys.IoctlCB:
		a := (*hlsys.CBArgs)(arg)
		f.cbs = append(f.cbs, *a)
		if a.Op == hlsys.CBOpCreate {
			a.Handle = hlsys.MmapTypeCB<<12 | f.nextH<<12
			f.nextH++
		}
		return nil
	case hlsys.IoctlCS:
		a := (*hlsys.CSArgs)(arg)
		chunks := unsafe.Slice((*hlsys.CSChunk)(ptrField(&a.In.ChunksExecute)), a.In.NumChunksExecute)
		f.csChunks = append(f.csChunks, append([]hlsys.CSChunk(nil), chunks...))
		if f.submit != nil {
			seq, err := f.submit(chunks)
			if err != nil {
				return err
			}
			*a = hlsys.CSArgs{}
			a.Out().Seq = seq
			return nil
		}
		f.seq++
		*a = hlsys.CSArgs{}
		a.Out().Seq = f.seq
		return nil
	case hlsys.IoctlWaitCS:
		a := (*hlsys.WaitCSArgs)(arg)
		seq, tmo := a.In.Seq, a.In.TimeoutUs
		out := hlsys.WaitCSOut{Status: hlsys.WaitCSStatusCompleted}
		var err error
		if f.wait != nil {
			out, err = f.wait(seq, tmo)
		}
		*a = hlsys.WaitCSArgs{}
		*a.Out() = out
		return err
	}
	return unix.ENOTTY
}

// memOps returns the MEMORY calls made so far.
func (f *fakeBackend) memOps() []hlsys.MemArgs {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]hlsys.MemArgs(nil), f.mems...)
}
