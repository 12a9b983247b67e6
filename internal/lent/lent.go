// Package lent holds the opaque values an attached gxfer receives from the
// runtime that owns a Gaudi: the borrowed device handle and the anchor of
// the runtime's mapped HBM pool. Package dma re-exports them as
// dma.AttachTarget and dma.PoolAnchor; only in-module code (package dma,
// the emulator's runtime in dma/hlsim) can build a target around a
// backend, so a public API never names internal/hlsys.
package lent

import "github.com/gxfer/gxfer/internal/hlsys"

// Target is a device lent by the runtime that owns it: an ioctl backend
// gxfer uses but never closes. The zero value means "no target given":
// look the runtime up.
type Target struct {
	b      hlsys.Backend
	fd     int // the borrowed fd number, -1 for an emulated runtime
	source string
}

// New wraps a borrowed backend. fd is the fd number it stands for (-1 when
// there is none, the emulator); source says where it came from ("fd",
// "synapse", "hlsim runtime").
func New(b hlsys.Backend, fd int, source string) Target {
	return Target{b: b, fd: fd, source: source}
}

// Backend returns the borrowed backend (nil for the zero Target).
func Backend(t Target) hlsys.Backend { return t.b }

// FD returns the borrowed fd number, -1 when there is none.
func FD(t Target) int {
	if t.b == nil {
		return -1
	}
	return t.fd
}

// Source says where the target came from.
func Source(t Target) string { return t.source }

// IsZero reports whether no target was given.
func (t Target) IsZero() bool { return t.b == nil }

// String names the target for logs and errors.
func (t Target) String() string {
	if t.b == nil {
		return "(no target)"
	}
	return t.b.Name() + " lent by " + t.source
}

// Anchor places the runtime's HBM pool: the pool is [PoolStart,
// PoolStart+PoolLen), inside the device allocation whose MAP returned
// MapVA (the driver exports DMA-BUFs only by that exact VA). On Gaudi2/3
// the runtime's SCAL "global_hbm" pool gives the three numbers
// (scal_pool_get_infoV2: device_base_allocated_address, device_base_address,
// totalSize). On Gaudi1 (no device MMU) the addresses are physical and
// MapVA is the pool start (or 0).
type Anchor struct {
	MapVA     uint64
	PoolStart uint64
	PoolLen   uint64
}
