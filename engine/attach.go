package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/internal/copier"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// ErrNoCopier: an operation on runtime memory needs a device copy (a
// local Copy, or staging through host memory when the NIC cannot register
// the DMA-BUF) and the Attachment has no DeviceCopier. Errors wrapping it
// also wrap ErrNotSupported.
var ErrNoCopier = gxerr.NoCopier

// DeviceCopier copies to and from the memory of a device the Habana
// runtime owns, with the runtime's own copy call (e.g. synMemCopyAsync on
// a stream, then synStreamSynchronize). An attached gxfer submits no
// command submission of its own (the runtime's scheduler owns the DMA
// engines), so every device copy it needs goes through the copier. The
// methods are called from engine goroutines, possibly concurrently, and
// return when the copy is complete, or once ctx is done (a deadline, or
// Engine.Close or Attachment.Detach after CloseGrace) with nothing left
// touching the memory passed to them: the engine releases it when they
// return. Host memory passed to them is gxfer's (Alloc(Host) buffers,
// staging buffers, registered memory); a runtime that needs host memory
// mapped first (synHostMap) must map it in the call or copy through its
// own pinned buffers.
type DeviceCopier interface {
	CopyHostToDevice(ctx context.Context, dst uint64, src []byte) error
	CopyDeviceToHost(ctx context.Context, dst []byte, src uint64) error
	CopyDeviceToDevice(ctx context.Context, dst, src, n uint64) error
}

// AttachConfig configures Engine.Attach.
type AttachConfig struct {
	// Target is the device the runtime lends: dma.BorrowFD(fd) with the
	// runtime's compute fd, or an emulated runtime's Target. The zero
	// value asks the runtime loaded in this process (dma.FindRuntime).
	Target dma.AttachTarget
	// Anchor places the runtime's mapped HBM pool (see dma.Attach).
	Anchor dma.PoolAnchor
	// Copier makes the device copies; nil: such operations fail with
	// ErrNoCopier.
	Copier DeviceCopier
}

// Attachment is a device the Habana runtime owns, used by this engine in
// attached mode: its HBM pool is exported once as a DMA-BUF, and
// Register turns ranges of it into Buffers that move by RDMA (zero copy,
// a DMA-BUF memory region at the range's offset), are shared with other
// processes (Buffer.ExportDMABuf: the pool's fd and the offset) and are
// copied by the application's DeviceCopier. gxfer never frees that
// memory, never closes the borrowed fd and submits nothing on it.
//
// Device resets are the runtime's to see, not gxfer's: in attached mode
// the engine cannot be told of one without taking the runtime's events
// from it (the driver keeps them per open file, which gxfer shares with
// the runtime, and reading them clears them: events_info in
// habanalabs_ioctl.c). The pool's DMA-BUF, and every RDMA memory region
// made from it, keep the runtime's device context alive in the driver, as
// any export does: call Detach when the runtime reports a reset, within
// the driver's release watchdog (30 s), or the driver kills the process.
// Until then operations on the attachment's buffers fail with what the
// runtime's copier and the NIC report. Detach (and Engine.Close) waits
// for the DeviceCopier's calls to return after cancelling their context:
// a copier that ignores ctx holds them until its copy is done, as memory
// is never released under a running copy.
//
// An Attachment not made by Engine.Attach (a declared Attachment{}, or a
// nil *Attachment) refuses Register and Detach with ErrInvalid; its Stats
// are zero and its Location is one no buffer can be at.
type Attachment struct {
	e   *Engine
	idx int
	att *dma.Attached
	rt  *copier.Runtime // its buffers and copier (internal/copier)
	// detached is closed once the first Detach has closed the DMA-BUF;
	// later (concurrent) calls wait for it.
	detached chan struct{}
}

// attachedMem is what a Buffer over runtime memory carries.
type attachedMem struct {
	a  *Attachment
	va uint64
}

// attachState is the engine's list of attachments.
type attachState struct {
	mu   sync.Mutex
	list []*Attachment
}

// Attach attaches the engine to a device the runtime owns (see
// AttachConfig and dma.Attach). The device appears in Devices with
// Attached set. Engine.Close detaches it. A refusal wraps the dma error
// and ErrInvalid (bad anchor or fd), ErrNotSupported (a kernel whose
// export API attach cannot use), ErrNoDevice (no target given and no
// runtime in this process) or ErrDevice.
func (e *Engine) Attach(cfg AttachConfig) (*Attachment, error) {
	if e.invalid() {
		return nil, errNoEngineMade
	}
	if !e.enter() {
		return nil, ErrClosed
	}
	defer e.exit()
	att, err := dma.Attach(cfg.Target, cfg.Anchor, dma.AttachOptions{Logger: e.cfg.Logger})
	if err != nil {
		return nil, newErr(dmaErrKind(err), "attach", err)
	}
	s := &e.attach
	s.mu.Lock()
	a := &Attachment{e: e, idx: len(s.list), att: att, rt: copier.NewRuntime(len(s.list), att, cfg.Copier), detached: make(chan struct{})}
	s.list = append(s.list, a)
	s.mu.Unlock()
	e.log.Info().Str("device", att.Name()).Str("lent_by", att.Source()).Uint64("pool", cfg.Anchor.PoolStart).
		Uint64("pool_len", cfg.Anchor.PoolLen).Bool("copier", cfg.Copier != nil).Msg("attached")
	return a, nil
}

// dmaErrKind is the engine's error kind for an error of package dma
// (a refused dma.Attach or AllocDevice): bad input (the anchor, the fd,
// a size, or an export the driver refuses with EINVAL) is ErrInvalid, an
// export API attach cannot use ErrNotSupported, no runtime in this
// process ErrNoDevice, a device out of memory ErrNoMemory, a closed one
// ErrClosed, one the driver reset ErrDeviceLost; anything else is the
// device's.
func dmaErrKind(err error) error {
	switch {
	case errors.Is(err, dma.ErrClosed):
		return ErrClosed
	case errors.Is(err, dma.ErrDeviceReset):
		return ErrDeviceLost
	case errors.Is(err, dma.ErrNoMemory):
		return ErrNoMemory
	case errors.Is(err, dma.ErrNoRuntime):
		return ErrNoDevice
	case errors.Is(err, dma.ErrInvalid):
		return ErrInvalid
	case errors.Is(err, dma.ErrNotSupported):
		return ErrNotSupported
	}
	return ErrDevice
}

// Location is where the attachment's buffers live.
func (a *Attachment) Location() Location {
	if a.invalid() {
		return noAttachment
	}
	return Location{gaudi: true, dev: a.idx, attached: true}
}

// noAttachment is the Location of an Attachment not made by Attach:
// runtime memory of no attachment (Alloc refuses every attached Location).
var noAttachment = Location{gaudi: true, dev: -1, attached: true}

// Register returns a Buffer over [va, va+n) of the runtime's pool (a
// tensor's device address, e.g. habana_frameworks' _data_ptr, and byte
// size). The memory stays the runtime's: Free (or Deregister) only drops
// gxfer's use of it, and the runtime must not free it before.
func (a *Attachment) Register(va uint64, n int) (*Buffer, error) {
	if a.invalid() {
		return nil, errNoAttachment
	}
	e := a.e
	// Inside the close gate, as Alloc and Engine.Register: Close collects
	// the live buffers only once no call that may still add one is in.
	if !e.admitAlloc() {
		return nil, ErrClosed
	}
	defer e.exit()
	if n <= 0 {
		return nil, newErr(ErrInvalid, fmt.Sprintf("size %d", n), nil)
	}
	if _, err := a.att.Region(va, uint64(n)); err != nil {
		if errors.Is(err, dma.ErrDetached) {
			return nil, newErr(ErrClosed, "attachment detached", err)
		}
		return nil, newErr(ErrInvalid, "register runtime memory", err)
	}
	b := &Buffer{eng: e, id: e.nextID.Add(1), loc: a.Location(), size: uint64(n), att: &attachedMem{a: a, va: va}}
	b.initMem()
	if !a.rt.Add(&b.m) {
		return nil, newErr(ErrClosed, "attachment detached", nil)
	}
	e.track(b)
	return b, nil
}

// Detach frees every buffer registered on the attachment (closing their
// memory regions) and closes the pool's DMA-BUF before it returns: the
// runtime's device release waits for both. Buffers with operations in
// flight are waited for up to Config.CloseGrace; then the copies in the
// runtime's copier have their context canceled (they fail with ErrClosed)
// and Detach waits for the copier to return them. The borrowed fd stays
// open. Idempotent.
func (a *Attachment) Detach() error {
	if a.invalid() {
		return errNoAttachment
	}
	bufs, ok := a.rt.Detach()
	if !ok {
		<-a.detached // return once the first call has closed the export
		return nil
	}
	defer close(a.detached)
	var errs []error
	for _, m := range bufs {
		errs = append(errs, m.Owner.(*Buffer).Free())
	}
	left := a.rt.WaitEmpty(a.e.cfg.CloseGrace)
	// Copies still in the runtime's copier are told to stop (their
	// context canceled) and waited for, as Engine.Close does: once Detach
	// returns the runtime may free the memory or release the device.
	if a.rt.StopCopies() > 0 && left > 0 {
		left = a.rt.WaitEmpty(a.e.cfg.CloseGrace) // the stopped copies release their buffers
	}
	if left > 0 {
		errs = append(errs, newErr(ErrTimeout, fmt.Sprintf("detach: %d buffers still in use; their DMA-BUF is closed anyway", left), nil))
	}
	errs = append(errs, a.att.Detach())
	return errors.Join(errs...)
}

// AttachStats are an attachment's counters.
type AttachStats struct {
	Buffers   int    // registered buffers not yet freed
	Copies    uint64 // DeviceCopier calls
	CopyBytes uint64 // bytes of those calls
	MRs       uint64 // DMA-BUF memory regions registered
	// Export describes the DMA-BUF of the runtime's pool that the
	// attachment exported (how, and where the pool lies in it).
	Export dma.PoolExport
}

// Stats returns the attachment's counters.
func (a *Attachment) Stats() AttachStats {
	if a.invalid() {
		return AttachStats{}
	}
	r := a.rt
	return AttachStats{Buffers: r.Len(), Copies: r.Copies.Load(), CopyBytes: r.CopyBytes.Load(), MRs: r.MRs.Load(), Export: a.att.Export()}
}

// info describes the attached device for Engine.Devices.
func (a *Attachment) info() DeviceInfo {
	di, an := describe(a.idx, a.att), a.att.Anchor()
	di.Node, di.Attached, di.LentBy, di.PoolStart, di.PoolLen = a.att.Name(), true, a.att.Source(), an.PoolStart, an.PoolLen
	return di
}

// all is a copy of the list.
func (s *attachState) all() []*Attachment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Attachment(nil), s.list...)
}

func (s *attachState) devices() []DeviceInfo {
	var out []DeviceInfo
	for _, a := range s.all() {
		if !a.rt.Detached() {
			out = append(out, a.info())
		}
	}
	return out
}

// detachAll detaches every attachment (Engine.Close, after the buffers).
func (s *attachState) detachAll() error {
	var errs []error
	for _, a := range s.all() {
		errs = append(errs, a.Detach())
	}
	return errors.Join(errs...)
}

// attachedPair reports whether a copy involves runtime memory.
func attachedPair(dst, src Slice) bool {
	return dst.buf != nil && dst.buf.att != nil || src.buf != nil && src.buf.att != nil
}

// attachedCopy runs a copy involving runtime memory through the
// attachment's copier, on a goroutine (Close waits for it), completing f
// (for one operation), or returns why it cannot. internal: a staging copy
// for an operation that holds the buffers.
func (e *Engine) attachedCopy(f *copier.Future, dst, src Slice, deadline time.Time, internal bool) error {
	if err := e.validatePair(dst, src); err != nil {
		return err
	}
	rt, err := copier.CheckRuntime(dst.cs(), src.cs())
	if err != nil {
		return err
	}
	if !internal {
		if err := acquirePair(dst, src); err != nil {
			return err
		}
		e.st.Submitted.Add(1)
	}
	f.SetSpin(e.cfg.WaitSpin)
	e.cp.CopyRuntime(rt, f, dst.cs(), src.cs(), deadline, internal)
	return nil
}
