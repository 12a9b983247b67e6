//go:build linux && cgo

package verbs

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Built reports whether this build has the cgo binding (false: the stub).
const Built = true

var (
	loadOnce sync.Once
	loadErr  error
)

// Load dlopen()s libibverbs (once; later calls return the first result).
// The error wraps ErrUnavailable and carries dlerror's reason.
func Load() error {
	loadOnce.Do(func() {
		name := os.Getenv(LibraryEnv)
		if name == "" {
			name = DefaultLibrary
		}
		cs := C.CString(name)
		defer C.free(unsafe.Pointer(cs))
		if C.gxv_load(cs) != 0 {
			loadErr = fmt.Errorf("%w: libibverbs not installed: %s", ErrUnavailable, C.GoString(C.gxv_load_error()))
		}
	})
	return loadErr
}

// HaveDmabufMR reports whether the loaded libibverbs exports
// ibv_reg_dmabuf_mr (rdma-core 34+). It says nothing about the device.
func HaveDmabufMR() bool {
	if Load() != nil {
		return false
	}
	cs := C.CString("reg_dmabuf_mr")
	defer C.free(unsafe.Pointer(cs))
	return C.gxv_have(cs) != 0
}

func noDevice(errno error) error {
	if errno == syscall.ENOSYS {
		return fmt.Errorf("%w: libibverbs found, 0 devices (no /sys/class/infiniband)", ErrNoDevice)
	}
	if errno != nil {
		return fmt.Errorf("%w: libibverbs found, 0 devices (ibv_get_device_list: %v)", ErrNoDevice, errno)
	}
	return fmt.Errorf("%w: libibverbs found, 0 devices", ErrNoDevice)
}

// deviceList calls fn with the devices, then frees the list.
func deviceList(fn func(devs []*C.struct_gxv_device) error) error {
	if err := Load(); err != nil {
		return err
	}
	var n C.int
	list, errno := C.gxv_get_device_list(&n)
	if list == nil {
		return noDevice(errno)
	}
	defer C.gxv_free_device_list(list)
	if n <= 0 {
		return noDevice(nil)
	}
	return fn(unsafe.Slice(list, int(n)))
}

// DeviceNames lists the verbs devices. With none, the error wraps
// ErrNoDevice (and ErrUnavailable).
func DeviceNames() ([]string, error) {
	var names []string
	err := deviceList(func(devs []*C.struct_gxv_device) error {
		for _, d := range devs {
			names = append(names, C.GoString(C.gxv_get_device_name(d)))
		}
		return nil
	})
	return names, err
}

// Context is an open device (struct ibv_context).
type Context struct {
	p    *C.struct_gxv_context
	name string
}

// Open opens the named device, or the first one if name is "".
func Open(name string) (*Context, error) {
	var c *Context
	err := deviceList(func(devs []*C.struct_gxv_device) error {
		for _, d := range devs {
			dn := C.GoString(C.gxv_get_device_name(d))
			if name != "" && dn != name {
				continue
			}
			p, errno := C.gxv_open_device(d)
			if p == nil {
				return errnoErr("ibv_open_device "+dn, asErrno(errno))
			}
			live.contexts.Add(1)
			c = &Context{p: p, name: dn}
			return nil
		}
		return fmt.Errorf("verbs: no device %q: %w", name, syscall.ENODEV)
	})
	return c, err
}

func asErrno(err error) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return syscall.EIO
}

// Name is the device name (e.g. "rxe0", "mlx5_0").
func (c *Context) Name() string { return c.name }

// NumCompVectors is the number of completion vectors.
func (c *Context) NumCompVectors() int {
	if c.p == nil {
		return 0
	}
	return int(c.p.num_comp_vectors)
}

// Close closes the device. Everything created from it must be destroyed
// first. A second Close returns nil.
func (c *Context) Close() error {
	if c == nil || c.p == nil {
		return nil
	}
	if rc := C.gxv_close_device(c.p); rc != 0 {
		return errnoErr("ibv_close_device", syscall.Errno(rc))
	}
	c.p = nil
	live.contexts.Add(-1)
	return nil
}

// QueryDevice is ibv_query_device.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	if c.p == nil {
		return DeviceAttr{}, ErrClosed
	}
	var a C.struct_gxv_device_attr
	if rc := C.gxv_query_device(c.p, &a); rc != 0 {
		return DeviceAttr{}, errnoErr("ibv_query_device", syscall.Errno(rc))
	}
	fw := C.GoStringN(&a.fw_ver[0], C.int(len(a.fw_ver)))
	for i := 0; i < len(fw); i++ {
		if fw[i] == 0 {
			fw = fw[:i]
			break
		}
	}
	return DeviceAttr{
		FWVer:           fw,
		NodeGUID:        be64(uint64(a.node_guid)),
		SysImageGUID:    be64(uint64(a.sys_image_guid)),
		MaxMRSize:       uint64(a.max_mr_size),
		PageSizeCap:     uint64(a.page_size_cap),
		VendorID:        uint32(a.vendor_id),
		VendorPartID:    uint32(a.vendor_part_id),
		HWVer:           uint32(a.hw_ver),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		DeviceCapFlags:  uint32(a.device_cap_flags),
		MaxSGE:          int(a.max_sge),
		MaxSGERd:        int(a.max_sge_rd),
		MaxCQ:           int(a.max_cq),
		MaxCQE:          int(a.max_cqe),
		MaxMR:           int(a.max_mr),
		MaxPD:           int(a.max_pd),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
		MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		MaxSRQ:          int(a.max_srq),
		AtomicCap:       uint32(a.atomic_cap),
		MaxPKeys:        uint16(a.max_pkeys),
		PhysPortCnt:     uint8(a.phys_port_cnt),
	}, nil
}

var nativeLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// be64 converts a __be64 field to the value its bytes spell big-endian.
func be64(v uint64) uint64 {
	if nativeLE {
		return bits.ReverseBytes64(v)
	}
	return v
}

// hton32 / ntoh32 convert immediate data (__be32).
func hton32(v uint32) uint32 {
	if nativeLE {
		return bits.ReverseBytes32(v)
	}
	return v
}

// QueryPort is ibv_query_port.
func (c *Context) QueryPort(port uint8) (PortAttr, error) {
	if c.p == nil {
		return PortAttr{}, ErrClosed
	}
	var a C.struct_gxv_port_attr
	if rc := C.gxv_query_port(c.p, C.uint8_t(port), &a); rc != 0 {
		return PortAttr{}, errnoErr(fmt.Sprintf("ibv_query_port %s/%d", c.name, port), syscall.Errno(rc))
	}
	return PortAttr{
		State:        PortState(a.state),
		MaxMTU:       MTU(a.max_mtu),
		ActiveMTU:    MTU(a.active_mtu),
		GIDTableLen:  int(a.gid_tbl_len),
		PortCapFlags: uint32(a.port_cap_flags),
		MaxMsgSize:   uint32(a.max_msg_sz),
		PKeyTableLen: uint16(a.pkey_tbl_len),
		LID:          uint16(a.lid),
		SMLID:        uint16(a.sm_lid),
		LMC:          uint8(a.lmc),
		ActiveWidth:  uint8(a.active_width),
		ActiveSpeed:  uint8(a.active_speed),
		PhysState:    uint8(a.phys_state),
		LinkLayer:    LinkLayer(a.link_layer),
	}, nil
}

// QueryGID is ibv_query_gid.
func (c *Context) QueryGID(port uint8, index int) (GID, error) {
	if c.p == nil {
		return GID{}, ErrClosed
	}
	var g C.struct_gxv_gid
	if rc := C.gxv_query_gid(c.p, C.uint8_t(port), C.int(index), &g); rc != 0 {
		return GID{}, errnoErr(fmt.Sprintf("ibv_query_gid %s/%d/%d", c.name, port, index), syscall.Errno(rc))
	}
	var out GID
	for i := range out {
		out[i] = byte(g.raw[i])
	}
	return out, nil
}

// PD is a protection domain.
type PD struct {
	p   *C.struct_gxv_pd
	ctx *Context
}

// AllocPD is ibv_alloc_pd.
func (c *Context) AllocPD() (*PD, error) {
	if c.p == nil {
		return nil, ErrClosed
	}
	p, errno := C.gxv_alloc_pd(c.p)
	if p == nil {
		return nil, errnoErr("ibv_alloc_pd", asErrno(errno))
	}
	live.pds.Add(1)
	return &PD{p: p, ctx: c}, nil
}

// Close is ibv_dealloc_pd. A second Close returns nil.
func (pd *PD) Close() error {
	if pd == nil || pd.p == nil {
		return nil
	}
	if rc := C.gxv_dealloc_pd(pd.p); rc != 0 {
		return errnoErr("ibv_dealloc_pd", syscall.Errno(rc))
	}
	pd.p = nil
	live.pds.Add(-1)
	return nil
}

// MR is a registered memory region.
type MR struct {
	p          *C.struct_gxv_mr
	lkey, rkey uint32
	addr, len  uint64
}

// RegMR is ibv_reg_mr_iova2 (ibv_reg_mr when iova == addr and the library
// predates it). The memory at addr must stay mapped until Close and must not
// be in the Go heap.
func (pd *PD) RegMR(addr uintptr, length, iova uint64, access Access) (*MR, error) {
	if pd.p == nil {
		return nil, ErrClosed
	}
	p, errno := C.gxv_reg_mr(pd.p, C.uint64_t(addr), C.uint64_t(length), C.uint64_t(iova), C.int(access))
	if p == nil {
		return nil, errnoErr("ibv_reg_mr", asErrno(errno))
	}
	return newMR(p), nil
}

// RegDmabufMR is ibv_reg_dmabuf_mr: length bytes at offset in the DMA-BUF
// fd, addressed by the peer as iova. The caller may close fd afterwards.
// EOPNOTSUPP (the device or libibverbs cannot) wraps ErrNotSupported.
func (pd *PD) RegDmabufMR(offset, length, iova uint64, fd int, access Access) (*MR, error) {
	if pd.p == nil {
		return nil, ErrClosed
	}
	p, errno := C.gxv_reg_dmabuf_mr(pd.p, C.uint64_t(offset), C.uint64_t(length), C.uint64_t(iova), C.int(fd), C.int(access))
	if p == nil {
		return nil, errnoErr("ibv_reg_dmabuf_mr", asErrno(errno))
	}
	return newMR(p), nil
}

// ProbeDmabufMR asks whether this device can register DMA-BUF memory, the
// way UCX does: ibv_reg_dmabuf_mr with fd -1. EBADF means the verb reached
// the point of looking the fd up, so it is supported: nil. Otherwise the
// error wraps ErrNotSupported and the errno (EOPNOTSUPP on Soft-RoCE), or,
// for errnos that say nothing about support (ENOMEM, EINTR, EAGAIN), only
// the errno: inconclusive.
func (pd *PD) ProbeDmabufMR() error {
	if pd.p == nil {
		return ErrClosed
	}
	p, errno := C.gxv_reg_dmabuf_mr(pd.p, 0, 4096, 0, -1, C.int(AccessLocalWrite))
	if p != nil { // nothing sane does this; it does prove support
		_ = newMR(p).Close()
		return nil
	}
	e := asErrno(errno)
	switch e {
	case syscall.EBADF:
		return nil
	case syscall.ENOMEM, syscall.EINTR, syscall.EAGAIN:
		return errnoErr("ibv_reg_dmabuf_mr(fd -1) probe", e)
	case syscall.EOPNOTSUPP:
		return errnoErr("ibv_reg_dmabuf_mr(fd -1) probe", e)
	}
	return fmt.Errorf("%w: %w", ErrNotSupported, errnoErr("ibv_reg_dmabuf_mr(fd -1) probe", e))
}

func newMR(p *C.struct_gxv_mr) *MR {
	live.mrs.Add(1)
	return &MR{p: p, lkey: uint32(p.lkey), rkey: uint32(p.rkey), addr: uint64(uintptr(p.addr)), len: uint64(p.length)}
}

// LKey is the local key.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey is the remote key.
func (mr *MR) RKey() uint32 { return mr.rkey }

// Addr is the registered start address (the mr->addr libibverbs reports).
func (mr *MR) Addr() uint64 { return mr.addr }

// Len is the registered length.
func (mr *MR) Len() uint64 { return mr.len }

// Close is ibv_dereg_mr. A second Close returns nil.
func (mr *MR) Close() error {
	if mr == nil || mr.p == nil {
		return nil
	}
	if rc := C.gxv_dereg_mr(mr.p); rc != 0 {
		return errnoErr("ibv_dereg_mr", syscall.Errno(rc))
	}
	mr.p = nil
	live.mrs.Add(-1)
	return nil
}
