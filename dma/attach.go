package dma

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/lent"
	"github.com/gxfer/gxfer/internal/synapse"
)

// AttachTarget is a Gaudi device lent to gxfer by the runtime that owns
// it (SynapseAI, PyTorch on HPU): its compute fd, which gxfer uses for
// INFO and MEMORY EXPORT_DMABUF_FD ioctls only and never closes. Build one
// with BorrowFD (a real fd), FindRuntime (ask the runtime loaded in this
// process), or from the emulator's runtime (hlsim.Runtime.Target). The
// zero value means "no target": Attach then calls FindRuntime.
type AttachTarget = lent.Target

// PoolAnchor places the runtime's mapped HBM pool; see Attach.
type PoolAnchor = lent.Anchor

// Attach errors.
var (
	// ErrNoRuntime: no fd was given and no runtime was found in this
	// process (it also wraps the lookup's reason, synapse.ErrNotFound).
	ErrNoRuntime = errors.New("no Habana runtime to attach to")
	// ErrNotInPool: a registered range is not inside the runtime's pool.
	ErrNotInPool = errors.New("range not in the runtime's pool")
	// ErrDetached: the attachment has been detached.
	ErrDetached = errors.New("detached")
)

// BorrowFD lends gxfer the runtime's compute fd (e.g. synDeviceGetInfoV2's
// fd). The fd stays the caller's: gxfer never closes it and issues no
// command submission on it. The node is read from /proc/self/fd to pick
// the ioctl numbering; an fd that is not a habanalabs compute node makes
// Attach fail. Attach and every ioctl after it check again that the fd
// still names that node: one the runtime closed, its number reused by
// another file, fails with ErrInvalid and gets no ioctl.
func BorrowFD(fd int) AttachTarget {
	return lent.New(newBorrowedFD(fd), fd, "fd")
}

// FindRuntime asks the Habana runtime loaded in this process for its
// compute fd (dlopen libSynapse.so with RTLD_NOLOAD, synDeviceGetInfoV2;
// see internal/synapse for the struct layout assumed). Errors wrap
// ErrNoRuntime and say why (library not loaded, symbol missing, no device
// acquired, unexpected layout).
func FindRuntime() (AttachTarget, error) {
	info, err := synapse.Lookup(synapse.Options{})
	if err != nil {
		return AttachTarget{}, newErr("find the Habana runtime", ErrNoRuntime, "", err)
	}
	t := BorrowFD(info.FD)
	return lent.New(lent.Backend(t), info.FD, "synapse ("+info.Library+")"), nil
}

// AttachOptions configures Attach. The zero value is usable.
type AttachOptions struct {
	Logger zerolog.Logger
}

// Attached is gxfer working beside the runtime that owns a device: the
// borrowed compute context and one DMA-BUF export of the runtime's HBM
// pool, made at Attach and kept until Detach. It never opens or closes
// the device, allocates or frees device memory, or submits a command
// submission (on Gaudi2/3 the runtime's firmware-driven scheduler owns the
// PDMA engines): there is no Submit here at all. Device copies are the
// application's, through its runtime (see engine.DeviceCopier).
//
// It is safe for concurrent use. Detach closes the export; the runtime's
// device release waits for every DMA-BUF and MR made from its context, so
// call Detach (after closing the MRs) before the runtime releases the
// device.
type Attached struct {
	b         hlsys.Backend // borrowed: never closed
	target    AttachTarget
	log       zerolog.Logger
	info      hlsys.HwIPInfo
	model     Model
	exportAPI string
	release   string
	anchor    PoolAnchor
	plan      attachPlan

	mu       sync.Mutex
	f        *fd.FD // the pool's DMA-BUF; nil once detached
	detached bool
}

// attachPlan is the pool's export: EXPORT_DMABUF_FD {addr, size, offset}
// (or the Gaudi1 forms), and where the pool starts inside the DMA-BUF.
type attachPlan struct {
	addr    uint64 // export address: the MAP VA (Gaudi2/3) or the physical start (Gaudi1)
	size    uint64 // DMA-BUF size, a page multiple
	kOffset uint64 // the kernel's offset argument
	carry   uint64 // DMA-BUF offset of PoolStart
	api     string
}

// Attach attaches to the device t lends (FindRuntime when t is the zero
// value) and exports the runtime's pool once as a DMA-BUF.
//
// The anchor says where the pool is: [PoolStart, PoolStart+PoolLen),
// inside the device allocation MAP placed at MapVA. The driver exports
// only by that exact VA (memhash_node_export_get, an exact match in the
// context's mem_hash), so the export is {addr = MapVA, offset =
// PoolStart-MapVA (page aligned down), size = the rest of the pool rounded
// up to PAGE_SIZE}, and a buffer at va sits at DMA-BUF offset
// Region(va).Offset (what ibv_reg_dmabuf_mr's offset must be).
//
// Kernels 6.3-6.6 (legacy ioctl numbering with the {addr, size, offset}
// form) validate the offset (validate_export_params: addr+offset page
// aligned, size at least a page, offset+size within the allocation's
// total_size) but build the importer's scatter list from the first page of
// the allocation (alloc_sgt_from_device_pages starts at page 0; fixed in
// 6.7 by "accel/habanalabs: add missing offset handling for dma-buf"). A
// NIC would then read the wrong bytes. There gxfer passes offset 0 and
// exports [MapVA, end of pool): the same validation accepts it (the pool
// lies inside the allocation), the bytes are right, and the difference
// PoolStart-MapVA is added to every registration offset. The cost: the
// DMA-BUF also covers [MapVA, PoolStart), which an IPC peer given the fd
// could register. Those kernels also keep one exported size per
// allocation, set by its every export (export_dmabuf_from_addr), and map
// each importer of any of its DMA-BUFs up to that size (hl_map_dmabuf): an
// export of the same allocation after Attach (the runtime's, HCL's, a
// per-tensor NIXL export) that is smaller than the pool's leaves MRs
// registered afterwards on gxfer's DMA-BUF short of the pool's end (their
// registration fails or maps fewer bytes); MRs registered before keep
// their mapping. gxfer cannot prevent it; kernels 6.7+ map each DMA-BUF's
// own size.
//
// The 6.1 API exports a Gaudi2 allocation by its ALLOC handle, which the
// runtime does not lend: ErrNotSupported. Gaudi1 (no MMU) exports the
// physical pool range with offset 0 in either API.
//
// Attach reads HW_IP_INFO and DEVICE_STATUS (INFO ioctls) and makes one
// EXPORT_DMABUF_FD; nothing else touches the device.
func Attach(t AttachTarget, a PoolAnchor, opts AttachOptions) (*Attached, error) {
	if t.IsZero() {
		var err error
		if t, err = FindRuntime(); err != nil {
			return nil, err
		}
	}
	b := lent.Backend(t)
	op := "attach to " + t.String()
	if bf, ok := b.(*borrowedFD); ok {
		// Checked again now: the fd may have been closed and its
		// number reused since BorrowFD.
		if err := bf.current(); err != nil {
			return nil, fmt.Errorf("dma: %s: %w", op, err)
		}
	}
	info, model, status, err := identify(b, op)
	if err != nil {
		return nil, err
	}
	if status != hlsys.DeviceStatusOperational {
		var cause error
		if DeviceStatus(status).Broken() {
			cause = ErrMalfunction // as NewDevice: MALFUNCTION and NEEDS_RESET do not end by themselves
		}
		return nil, newErr(op, ErrNotOperational, "device status "+statusName(status), cause)
	}
	at := &Attached{b: b, target: t, info: info, model: model, anchor: a, release: kernelRelease(b)}
	at.exportAPI = chooseExportAPI(b.Numbering(), at.release)
	at.log = opts.Logger.With().Str("device", b.Name()).Str("mode", "attached").Logger()
	honored := exportOffsetHonored(at.exportAPI, b.Numbering())
	at.plan, err = planAttach(model, at.exportAPI, honored, a, uint64(os.Getpagesize()))
	if err != nil {
		return nil, fmt.Errorf("dma: %s: %w", op, err)
	}
	p := at.plan
	switch {
	case p.api == ExportAPI61:
		at.f, err = hlsys.MemExportDMABuf61(b, p.addr, p.size)
	default:
		at.f, err = hlsys.MemExportDMABuf(b, p.addr, p.size, p.kOffset)
	}
	if err != nil {
		return nil, wrapErr(fmt.Sprintf("%s: export the pool (addr %#x, size %d, offset %d)", op, p.addr, p.size, p.kOffset), err)
	}
	at.log.Debug().Uint64("addr", p.addr).Uint64("size", p.size).Uint64("kernel_offset", p.kOffset).
		Uint64("pool_offset", p.carry).Bool("offset_honored", honored).Msg("pool exported")
	return at, nil
}

// planAttach picks the pool's export for a model and export API.
func planAttach(m Model, api string, honored bool, a PoolAnchor, page uint64) (attachPlan, error) {
	op := fmt.Sprintf("pool anchor (map VA %#x, start %#x, %d bytes)", a.MapVA, a.PoolStart, a.PoolLen)
	end := a.PoolStart + a.PoolLen
	switch {
	case a.PoolLen == 0:
		return attachPlan{}, newErr(op, ErrInvalid, "empty pool", nil)
	case end < a.PoolStart:
		return attachPlan{}, newErr(op, ErrInvalid, "pool wraps around", nil)
	}
	if !m.hasDeviceMMU() {
		// Physical DRAM: export the pool's pages themselves, offset 0.
		start := a.PoolStart - a.PoolStart%page
		size, ok := alignUp(end-start, page)
		if !ok {
			return attachPlan{}, newErr(op, ErrInvalid, "pool too large", nil)
		}
		return attachPlan{addr: start, size: size, carry: a.PoolStart - start, api: api}, nil
	}
	switch {
	case api == ExportAPI61:
		return attachPlan{}, newErr(op, ErrNotSupported,
			"this kernel's EXPORT_DMABUF_FD takes the ALLOC handle (6.1 API), which the runtime does not lend; attach needs kernel 6.3 or later", nil)
	case a.PoolStart < a.MapVA:
		return attachPlan{}, newErr(op, ErrInvalid, "pool starts before the mapped VA", nil)
	case a.MapVA%page != 0:
		return attachPlan{}, newErr(op, ErrInvalid, fmt.Sprintf("map VA not %d-byte aligned (it must be the VA MAP returned)", page), nil)
	}
	delta := a.PoolStart - a.MapVA
	k := delta - delta%page
	if !honored {
		k = 0 // 6.3-6.6: the kernel would ignore it; carry it ourselves
	}
	size, ok := alignUp(end-a.MapVA-k, page)
	if !ok {
		return attachPlan{}, newErr(op, ErrInvalid, "pool too large", nil)
	}
	return attachPlan{addr: a.MapVA, size: size, kOffset: k, carry: delta - k, api: api}, nil
}

// Region is where a range of the runtime's pool sits in the pool's
// DMA-BUF: the arguments of ibv_reg_dmabuf_mr (fd, offset, length; iova =
// the range's device VA) or what an IPC peer is handed.
type Region struct {
	FD     int    // the pool's DMA-BUF; owned by the Attached, valid until Detach
	Offset uint64 // DMA-BUF offset of the range's first byte
	Len    uint64
	VA     uint64 // the range's device address
}

// Region returns where [va, va+n) is in the pool's DMA-BUF. The range
// must lie in the pool (ErrNotInPool), n > 0.
func (a *Attached) Region(va, n uint64) (Region, error) {
	op := fmt.Sprintf("region [%#x, +%d)", va, n)
	end := a.anchor.PoolStart + a.anchor.PoolLen
	if n == 0 {
		return Region{}, newErr(op, ErrInvalid, "empty range", nil)
	}
	if va < a.anchor.PoolStart || va >= end || n > end-va {
		return Region{}, newErr(op, ErrNotInPool, fmt.Sprintf("pool is [%#x, %#x)", a.anchor.PoolStart, end), nil)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.detached {
		return Region{}, newErr(op, ErrDetached, "", nil)
	}
	return Region{FD: a.f.Int(), Offset: a.plan.carry + (va - a.anchor.PoolStart), Len: n, VA: va}, nil
}

// DupDMABuf returns a duplicate of the pool's DMA-BUF fd, the caller's to
// close (to hand to another process; pair it with Region's Offset).
func (a *Attached) DupDMABuf() (*fd.FD, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.detached {
		return nil, newErr("dup the pool's DMA-BUF", ErrDetached, "", nil)
	}
	return a.f.Dup()
}

// DMABufFD returns the pool's DMA-BUF, owned by the Attached (valid
// until Detach; do not close it), or nil once detached.
func (a *Attached) DMABufFD() *fd.FD {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.detached {
		return nil
	}
	return a.f
}

// PoolExport describes the pool's DMA-BUF.
type PoolExport struct {
	Addr         uint64 // EXPORT_DMABUF_FD addr
	Size         uint64 // DMA-BUF size (page multiple)
	KernelOffset uint64 // EXPORT_DMABUF_FD offset
	PoolOffset   uint64 // DMA-BUF offset of the pool's first byte
	API          string // ExportAPI61 or ExportAPIAddr
	Live         bool   // false once detached
}

// Export describes the pool's DMA-BUF.
func (a *Attached) Export() PoolExport {
	a.mu.Lock()
	live := !a.detached
	a.mu.Unlock()
	p := a.plan
	return PoolExport{Addr: p.addr, Size: p.size, KernelOffset: p.kOffset, PoolOffset: p.carry, API: p.api, Live: live}
}

// Anchor is the pool anchor Attach was given.
func (a *Attached) Anchor() PoolAnchor { return a.anchor }

// Model returns the device generation.
func (a *Attached) Model() Model { return a.model }

// Info returns the HW_IP_INFO read at Attach.
func (a *Attached) Info() HwInfo { return hwInfo(a.info) }

// Name names the borrowed node.
func (a *Attached) Name() string { return a.b.Name() }

// Source says who lent the device ("fd", "synapse (...)", "hlsim runtime").
func (a *Attached) Source() string { return lent.Source(a.target) }

// Emulated reports whether the device is the emulator.
func (a *Attached) Emulated() bool { return a.b.Emulated() }

// Numbering returns the node's ioctl numbering.
func (a *Attached) Numbering() Numbering { return Numbering(a.b.Numbering()) }

// ExportAPI returns the export API in use.
func (a *Attached) ExportAPI() string { return a.exportAPI }

// KernelRelease returns the kernel release used to pick the export API.
func (a *Attached) KernelRelease() string { return a.release }

// DramUsage returns DRAM_USAGE (an INFO ioctl on the borrowed fd).
func (a *Attached) DramUsage() (DramUsage, error) {
	// No ioctl through the borrowed fd once detached (the runtime may
	// have closed it, and the number may name another file); the lock
	// keeps Detach from returning while one is under way.
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.detached {
		return DramUsage{}, newErr("DRAM usage", ErrDetached, "", nil)
	}
	u, err := hlsys.GetDramUsage(a.b)
	return DramUsage{Free: u.DramFreeMem, Used: u.CtxDramMem}, wrapErr("DRAM usage", err)
}

// Detach closes the pool's DMA-BUF. The borrowed fd is left open (it is
// the runtime's). Close every MR registered on the DMA-BUF first: the
// kernel keeps the export (and the runtime's device) alive while an
// importer holds it. Idempotent.
func (a *Attached) Detach() error {
	a.mu.Lock()
	if a.detached {
		a.mu.Unlock()
		return nil
	}
	a.detached = true
	f := a.f
	// Closed under the lock, so that a concurrent Detach (or DramUsage)
	// does not return before the DMA-BUF is closed.
	err := f.Close()
	a.mu.Unlock()
	if err != nil {
		return newErr("detach: close the pool's DMA-BUF", nil, "", err)
	}
	a.log.Debug().Msg("detached")
	return nil
}
