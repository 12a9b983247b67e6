package hlsim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/lent"
)

// RuntimeConfig configures a Runtime.
type RuntimeConfig struct {
	// PoolSize is the size of the runtime's HBM pool (default 64 MiB).
	PoolSize uint64
	// PoolOffset is where the pool starts in its allocation: the pool is
	// [MapVA+PoolOffset, +PoolSize). Non-zero models Gaudi2's SCAL pools
	// carved out of a larger allocation (pool start != MAP VA).
	PoolOffset uint64
}

// Runtime plays the Habana runtime (SynapseAI) in tests: in the same
// process, it opens the emulated device (the one compute context the
// driver allows), allocates and maps one HBM pool (ALLOC + MAP, as SCAL's
// "global_hbm") and lends gxfer the context and the pool's anchor. It also
// offers the device copies a runtime would (synMemCopyAsync), as a
// DeviceCopier: they are the runtime's own, made through its own DMA-BUF
// of the pool (standing for its engines, which gxfer never sees), and
// counted in RuntimeStats, apart from the device's CS counters.
//
// The handle it lends (Target) counts what the borrower does with it, so
// tests can prove an attached gxfer never closes it and submits nothing.
type Runtime struct {
	d      *Device
	b      hlsys.Backend
	lent   *lentBackend
	handle uint64 // ALLOC handle (Gaudi2)
	mapVA  uint64
	alloc  uint64 // allocation size
	anchor lent.Anchor

	// use is held shared by a copy from span to its last system call on
	// copyFD and exclusively by Unmap, so Unmap never closes the export
	// under a copy (which would then use a closed, possibly reused, fd
	// number) and waits for copies in flight, as the runtime synchronizes
	// its streams before it frees memory. Order: use, then mu.
	use      sync.RWMutex
	mu       sync.Mutex
	copyFD   *fd.FD // the runtime's own export, for its copies
	copyBase uint64 // file offset of mapVA in copyFD
	mapped   bool
	closed   bool

	copies, copyBytes atomic.Uint64
}

// RuntimeStats counts what the runtime did and what its borrower did
// through the lent handle.
type RuntimeStats struct {
	Copies    uint64 // device copies made for the borrower (DeviceCopier calls)
	CopyBytes uint64

	LentIoctls  uint64 // every ioctl made through the lent handle
	LentCS      uint64 // CS, WAIT_CS and CB ioctls through it (gxfer attached: 0)
	LentMemOps  uint64 // MEMORY ioctls other than EXPORT_DMABUF_FD (0)
	LentExports uint64 // EXPORT_DMABUF_FD through it
	LentCloses  uint64 // Close calls on it (gxfer attached: 0)
	LentMmaps   uint64 // Mmap calls on it (0)
}

// NewRuntime opens the device and sets up the runtime's pool.
func (d *Device) NewRuntime(cfg RuntimeConfig) (_ *Runtime, err error) {
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 64 << 20
	}
	b, err := d.open()
	if err != nil {
		return nil, err
	}
	r := &Runtime{d: d, b: b}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	info, err := hlsys.GetHwIPInfo(b)
	if err != nil {
		return nil, err
	}
	want := cfg.PoolOffset + cfg.PoolSize
	if d.cfg.Model == ModelGaudi1 {
		// No MMU: the pool is physical DRAM; ALLOC is accounting only.
		if _, err := hlsys.MemAlloc(b, want, 0, 0); err != nil {
			return nil, err
		}
		r.mapVA, r.alloc = info.DramBaseAddress, want
	} else {
		pg := info.DeviceMemAllocDefaultPageSize
		if pg == 0 {
			pg = info.DramPageSize
		}
		r.alloc = (want + pg - 1) / pg * pg
		if r.handle, err = hlsys.MemAlloc(b, r.alloc, 0, 0); err != nil {
			return nil, err
		}
		if r.mapVA, err = hlsys.MemMapDevice(b, r.handle, 0, 0); err != nil {
			_ = hlsys.MemFree(b, r.handle)
			r.handle = 0
			return nil, err
		}
	}
	r.mapped = true
	r.anchor = lent.Anchor{MapVA: r.mapVA, PoolStart: r.mapVA + cfg.PoolOffset, PoolLen: cfg.PoolSize}
	r.lent = &lentBackend{Backend: b}
	return r, nil
}

// Target is the device the runtime lends: a dma.AttachTarget.
func (r *Runtime) Target() lent.Target { return lent.New(r.lent, -1, "hlsim runtime") }

// Anchor is the pool's anchor: a dma.PoolAnchor.
func (r *Runtime) Anchor() lent.Anchor { return r.anchor }

// Device is the emulated device.
func (r *Runtime) Device() *Device { return r.d }

// Stats returns the runtime's counters.
func (r *Runtime) Stats() RuntimeStats {
	l := r.lent
	return RuntimeStats{
		Copies: r.copies.Load(), CopyBytes: r.copyBytes.Load(),
		LentIoctls: l.ioctls.Load(), LentCS: l.cs.Load(), LentMemOps: l.memOps.Load(),
		LentExports: l.exports.Load(), LentCloses: l.closes.Load(), LentMmaps: l.mmaps.Load(),
	}
}

// Usable reports whether the runtime's own context still answers (an
// INFO ioctl on it): false once anyone closed it.
func (r *Runtime) Usable() error {
	_, err := hlsys.GetDeviceStatus(r.b)
	return err
}

// ErrRange is returned by the copier for a range outside the pool.
var ErrRange = errors.New("hlsim runtime: range outside the pool")

// span returns the file offset of [va, va+n) in the runtime's export.
// The caller holds r.use shared while it uses the fd.
func (r *Runtime) span(va, n uint64) (*fd.FD, int64, error) {
	end := r.anchor.PoolStart + r.anchor.PoolLen
	if va < r.anchor.PoolStart || va >= end || n > end-va {
		return nil, 0, fmt.Errorf("%w: [%#x, +%d)", ErrRange, va, n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || !r.mapped {
		return nil, 0, unix.ENODEV
	}
	if r.copyFD == nil {
		var f *fd.FD
		var err error
		switch {
		case r.d.cfg.Model == ModelGaudi1:
			pg := uint64(pageSize)
			size := (r.alloc + pg - 1) / pg * pg
			if r.d.exportNew {
				f, err = hlsys.MemExportDMABuf(r.b, r.mapVA, size, 0)
			} else {
				f, err = hlsys.MemExportDMABuf61(r.b, r.mapVA, size)
			}
		case r.d.exportNew:
			f, err = hlsys.MemExportDMABuf(r.b, r.mapVA, r.alloc, 0)
		default:
			f, err = hlsys.MemExportDMABuf61(r.b, r.handle, r.alloc)
		}
		if err != nil {
			return nil, 0, err
		}
		v, err := r.d.DMABufView(f.Int())
		if err != nil {
			_ = f.Close()
			return nil, 0, err
		}
		r.copyFD, r.copyBase = f, v.Start
	}
	return r.copyFD, int64(r.copyBase + (va - r.mapVA)), nil
}

func (r *Runtime) count(n int) {
	r.copies.Add(1)
	r.copyBytes.Add(uint64(n))
}

// CopyHostToDevice copies src to device address dst (a DeviceCopier).
func (r *Runtime) CopyHostToDevice(ctx context.Context, dst uint64, src []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.use.RLock()
	defer r.use.RUnlock()
	f, off, err := r.span(dst, uint64(len(src)))
	if err != nil {
		return err
	}
	if _, err := unix.Pwrite(f.Int(), src, off); err != nil {
		return err
	}
	r.count(len(src))
	return nil
}

// CopyDeviceToHost copies from device address src to dst (a DeviceCopier).
func (r *Runtime) CopyDeviceToHost(ctx context.Context, dst []byte, src uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.use.RLock()
	defer r.use.RUnlock()
	f, off, err := r.span(src, uint64(len(dst)))
	if err != nil {
		return err
	}
	if _, err := unix.Pread(f.Int(), dst, off); err != nil {
		return err
	}
	r.count(len(dst))
	return nil
}

// CopyDeviceToDevice copies n bytes between device addresses (a
// DeviceCopier).
func (r *Runtime) CopyDeviceToDevice(ctx context.Context, dst, src, n uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.use.RLock()
	defer r.use.RUnlock()
	sf, soff, err := r.span(src, n)
	if err != nil {
		return err
	}
	df, doff, err := r.span(dst, n)
	if err != nil {
		return err
	}
	buf := make([]byte, n)
	if _, err := unix.Pread(sf.Int(), buf, soff); err != nil {
		return err
	}
	if _, err := unix.Pwrite(df.Int(), buf, doff); err != nil {
		return err
	}
	r.count(int(n))
	return nil
}

// Unmap unmaps the pool (closing the runtime's own export first, once the
// runtime's copies in flight have ended), as the runtime does before it
// releases the device. The driver refuses (EINVAL)
// while a DMA-BUF exported from the pool is open, gxfer's included.
func (r *Runtime) Unmap() error {
	r.use.Lock()
	defer r.use.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.copyFD != nil {
		_ = r.copyFD.Close()
		r.copyFD = nil
	}
	if !r.mapped {
		return nil
	}
	if r.d.cfg.Model != ModelGaudi1 {
		if err := hlsys.MemUnmap(r.b, r.mapVA); err != nil {
			return err
		}
		if err := hlsys.MemFree(r.b, r.handle); err != nil {
			return err
		}
	}
	r.mapped = false
	return nil
}

// Close releases the pool and closes the runtime's context. Idempotent.
func (r *Runtime) Close() error {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil
	}
	err := r.Unmap()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return errors.Join(err, r.b.Close())
}

// lentBackend is the runtime's context as gxfer sees it: the same context
// (a shared fd), with every call counted. Close closes the context, as
// closing the runtime's fd would.
type lentBackend struct {
	hlsys.Backend
	ioctls, cs, memOps, exports, closes, mmaps atomic.Uint64
}

func (l *lentBackend) Ioctl(req uintptr, arg unsafe.Pointer) error {
	l.ioctls.Add(1)
	if _, nr, ok := hlsys.Decode(req); ok {
		switch nr {
		case hlsys.IoctlCS, hlsys.IoctlWaitCS, hlsys.IoctlCB:
			l.cs.Add(1)
		case hlsys.IoctlMemory:
			if (*hlsys.MemArgs)(arg).Op == hlsys.MemOpExportDMABuf {
				l.exports.Add(1)
			} else {
				l.memOps.Add(1)
			}
		}
	}
	return l.Backend.Ioctl(req, arg)
}

func (l *lentBackend) Mmap(offset int64, length int) ([]byte, error) {
	l.mmaps.Add(1)
	return l.Backend.Mmap(offset, length)
}

func (l *lentBackend) Close() error {
	l.closes.Add(1)
	return l.Backend.Close()
}

// KernelRelease passes the emulated kernel release on (dma reads it to
// pick the export API).
func (l *lentBackend) KernelRelease() string {
	if kr, ok := l.Backend.(interface{ KernelRelease() string }); ok {
		return kr.KernelRelease()
	}
	return ""
}
