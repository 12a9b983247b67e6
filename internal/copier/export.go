package copier

import (
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/memcache"
)

// Export is a reference to the DMA-BUF holding a buffer's device memory:
// for memory gxfer allocated, its allocation's export (through the
// device's export cache, at the buffer's offset, which package dma carries
// where the kernel ignores an export offset); for runtime memory, the
// pool's DMA-BUF.
type Export struct {
	g      *Device
	r      *memcache.Region // nil for runtime memory
	FD     *fd.FD           // owned by the copier (the cache or the attachment)
	Offset uint64           // the buffer's first byte in the DMA-BUF
	Size   uint64           // the DMA-BUF's size
}

// ExportOf exports m (device memory), creating the export on first use.
// Release drops the reference.
func ExportOf(m *Mem) (Export, error) {
	if m.RT != nil {
		reg, err := m.RT.MR(m)
		if err != nil {
			return Export{}, err
		}
		f := m.RT.Att.DMABufFD()
		if f == nil {
			return Export{}, gxerr.New(gxerr.Closed, "attachment detached", nil)
		}
		return Export{FD: f, Offset: reg.Offset, Size: m.RT.Att.Export().Size}, nil
	}
	g := m.Device
	r, err := g.Exports.Get(m.Addr, m.Size, memcache.AccessRead|memcache.AccessWrite)
	if err != nil {
		// Typed: the device refusing the export is ErrDevice.
		kind := gxerr.Device
		switch {
		case g.Dev.ResetErr() != nil || errors.Is(err, dma.ErrDeviceReset):
			// The driver reset the device: the buffer went with its
			// context (its export cache is closed once it is retired).
			kind = gxerr.DeviceLost
			if rerr := g.Dev.ResetErr(); rerr != nil && !errors.Is(err, dma.ErrDeviceReset) {
				err = errors.Join(rerr, err)
			}
		case errors.Is(err, gxerr.Invalid):
			kind = gxerr.Invalid
		case errors.Is(err, memcache.ErrClosed):
			kind = gxerr.Closed
		}
		return Export{}, gxerr.New(kind, fmt.Sprintf("export gaudi%d buffer %d", g.Idx, m.ID), err)
	}
	db := r.Value().(*dma.DMABuf)
	off, err := DMABufOffset(m, db)
	if err != nil {
		g.Exports.Put(r)
		return Export{}, err
	}
	return Export{g: g, r: r, FD: db.FD(), Offset: off, Size: db.Size()}, nil
}

// Release drops the reference.
func (x *Export) Release() {
	if x.r != nil {
		x.g.Exports.Put(x.r)
	}
}

// DMABufOffset is the offset of m's first byte in db, an export of m's
// allocation; an error if db does not cover m.
func DMABufOffset(m *Mem, db *dma.DMABuf) (uint64, error) {
	off, ok := db.OffsetOf(m.Addr - db.Mem().Addr())
	if !ok || m.Size > db.Size()-off {
		return 0, gxerr.New(gxerr.Device, fmt.Sprintf("the DMA-BUF of gaudi%d buffer %d (%d bytes from allocation byte %d) does not cover the buffer",
			m.Device.Idx, m.ID, db.Size(), db.MemOffset()), nil)
	}
	return off, nil
}

// MR is where runtime memory m lies for ibv_reg_dmabuf_mr: the pool's
// DMA-BUF and m's offset in it (the region's iova is m.Addr, its length
// m.Size, so remote keys and work requests use device addresses).
func (r *Runtime) MR(m *Mem) (dma.Region, error) {
	reg, err := r.Att.Region(m.Addr, m.Size)
	if err != nil {
		return reg, gxerr.New(gxerr.Closed, fmt.Sprintf("buffer %d: runtime memory", m.ID), err)
	}
	return reg, nil
}
