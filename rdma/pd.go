package rdma

import (
	"fmt"
	"unsafe"

	"github.com/gxfer/gxfer/internal/verbs"
)

// PD is a protection domain.
type PD struct {
	d  *Device
	pd *verbs.PD

	// guarded by d.mu
	closed   bool
	children int // open MRs and QPs
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	p, err := d.ctx.AllocPD()
	if err != nil {
		return nil, err
	}
	pd := &PD{d: d, pd: p}
	d.addLocked(pd)
	d.counts.PDs++
	return pd, nil
}

// Device is the PD's device.
func (pd *PD) Device() *Device { return pd.d }

// Close deallocates the PD. It fails with ErrBusy while MRs or QPs
// created from it are open. A second Close returns nil.
func (pd *PD) Close() error { return pd.close(false) }

func (pd *PD) closeForDevice() error { return pd.close(true) }

func (pd *PD) close(force bool) error {
	d := pd.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if pd.closed {
		return nil
	}
	if pd.children > 0 && !force {
		return fmt.Errorf("%w: PD has %d open MRs/QPs", ErrBusy, pd.children)
	}
	if err := pd.pd.Close(); err != nil {
		return err
	}
	pd.closed = true
	d.removeLocked(pd)
	d.counts.PDs--
	return nil
}

// addChild counts a new MR or QP (d.mu held).
func (pd *PD) addChildLocked() error {
	if pd.closed || pd.d.closed {
		return ErrClosed
	}
	pd.children++
	return nil
}

// MR is a registered memory region.
type MR struct {
	pd     *PD
	mr     *verbs.MR
	dmabuf bool

	// guarded by pd.d.mu
	closed bool
}

// Register registers b (access 0 means AccessDefault). b must not be in
// the Go heap (use NewBuffer or other mmapped memory) and must stay mapped
// until the MR is closed.
func (pd *PD) Register(b []byte, access Access) (*MR, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty registration", ErrInvalid)
	}
	if access == 0 {
		access = AccessDefault
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pd.register(func() (*verbs.MR, error) {
		return pd.pd.RegMR(addr, uint64(len(b)), uint64(addr), access)
	}, false)
}

// RegisterDMABuf registers length bytes at offset in a DMA-BUF fd (e.g. an
// export of Gaudi device memory); the peer and local SGEs address it as
// iova. The fd may be closed afterwards. If the device cannot (see
// Device.DMABufSupport), the error wraps ErrNotSupported and the errno
// (EOPNOTSUPP on Soft-RoCE): the caller falls back to staging through
// host memory.
func (pd *PD) RegisterDMABuf(fd int, offset, length, iova uint64, access Access) (*MR, error) {
	if fd < 0 || length == 0 {
		return nil, fmt.Errorf("%w: DMA-BUF fd %d length %d", ErrInvalid, fd, length)
	}
	if access == 0 {
		access = AccessDefault
	}
	return pd.register(func() (*verbs.MR, error) {
		return pd.pd.RegDmabufMR(offset, length, iova, fd, access)
	}, true)
}

func (pd *PD) register(reg func() (*verbs.MR, error), dmabuf bool) (*MR, error) {
	d := pd.d
	d.mu.Lock()
	if err := pd.addChildLocked(); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	d.mu.Unlock()
	m, err := reg() // pinning can be slow: not under d.mu
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil && d.closed {
		_ = m.Close()
		err = ErrClosed
	}
	if err != nil {
		pd.children--
		return nil, err
	}
	mr := &MR{pd: pd, mr: m, dmabuf: dmabuf}
	d.addLocked(mr)
	d.counts.MRs++
	return mr, nil
}

// LKey is the local key.
func (mr *MR) LKey() uint32 { return mr.mr.LKey() }

// RKey is the remote key.
func (mr *MR) RKey() uint32 { return mr.mr.RKey() }

// Addr is the MR's start in the address space work requests use: the
// virtual address for host memory, the iova for DMA-BUF memory.
func (mr *MR) Addr() uint64 { return mr.mr.Addr() }

// Len is the registered length.
func (mr *MR) Len() uint64 { return mr.mr.Len() }

// IsDMABuf reports whether the MR was registered from a DMA-BUF.
func (mr *MR) IsDMABuf() bool { return mr.dmabuf }

// Remote is what a peer needs to RDMA into or out of the whole MR.
func (mr *MR) Remote() RemoteMR { return RemoteMR{Addr: mr.Addr(), Len: mr.Len(), RKey: mr.RKey()} }

// Seg is n bytes at off in the MR, for a work request's local side.
func (mr *MR) Seg(off, n uint64) Seg { return Seg{MR: mr, Off: off, Len: n} }

// Close deregisters the MR. A second Close returns nil.
func (mr *MR) Close() error { return mr.close() }

func (mr *MR) closeForDevice() error { return mr.close() }

func (mr *MR) close() error {
	d := mr.pd.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if mr.closed {
		return nil
	}
	if err := mr.mr.Close(); err != nil {
		return err
	}
	mr.closed = true
	mr.pd.children--
	d.removeLocked(mr)
	d.counts.MRs--
	return nil
}

// RemoteMR is a peer's registered range: what RDMA write/read target.
type RemoteMR struct {
	Addr uint64
	Len  uint64
	RKey uint32
}

// At is the remote address off bytes into the range.
func (r RemoteMR) At(off uint64) RemoteAddr { return RemoteAddr{Addr: r.Addr + off, RKey: r.RKey} }
