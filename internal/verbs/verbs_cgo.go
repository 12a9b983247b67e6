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

// CompChannel is a completion event channel. Its fd can be made
// non-blocking and waited on with the Go netpoller.
type CompChannel struct {
	p   *C.struct_gxv_comp_channel
	mu  sync.Mutex
	cqs map[*C.struct_gxv_cq]*CQ
}

// CreateCompChannel is ibv_create_comp_channel.
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	if c.p == nil {
		return nil, ErrClosed
	}
	p, errno := C.gxv_create_comp_channel(c.p)
	if p == nil {
		return nil, errnoErr("ibv_create_comp_channel", asErrno(errno))
	}
	live.channels.Add(1)
	return &CompChannel{p: p, cqs: map[*C.struct_gxv_cq]*CQ{}}, nil
}

// FD is the channel's file descriptor (owned by libibverbs: do not close).
func (ch *CompChannel) FD() int {
	if ch.p == nil {
		return -1
	}
	return int(ch.p.fd)
}

// GetCQEvent is ibv_get_cq_event: the CQ that has an event. On a
// non-blocking fd with nothing pending the error is EAGAIN. Every event
// must be acknowledged (CQ.Ack) before the CQ is destroyed.
func (ch *CompChannel) GetCQEvent() (*CQ, error) {
	if ch.p == nil {
		return nil, ErrClosed
	}
	p, errno := C.gxv_get_cq_event(ch.p)
	if p == nil {
		return nil, errnoErr("ibv_get_cq_event", asErrno(errno))
	}
	ch.mu.Lock()
	cq := ch.cqs[p]
	ch.mu.Unlock()
	if cq == nil {
		return nil, fmt.Errorf("verbs: event for an unknown CQ %p", p)
	}
	return cq, nil
}

// Close is ibv_destroy_comp_channel (EBUSY while a CQ uses it). A second
// Close returns nil.
func (ch *CompChannel) Close() error {
	if ch == nil || ch.p == nil {
		return nil
	}
	if rc := C.gxv_destroy_comp_channel(ch.p); rc != 0 {
		return errnoErr("ibv_destroy_comp_channel", syscall.Errno(rc))
	}
	ch.p = nil
	live.channels.Add(-1)
	return nil
}

// CQ is a completion queue with a C array for polling.
type CQ struct {
	p   *C.struct_gxv_cq
	ch  *CompChannel
	cqe int

	mu  sync.Mutex
	wc  *C.struct_gxv_wc
	wcN int
}

// CreateCQ is ibv_create_cq with at least cqe entries, events on ch (may be
// nil) and a poll array of batch entries (CQ.Poll's upper bound).
func (c *Context) CreateCQ(cqe int, ch *CompChannel, vector int, batch int) (*CQ, error) {
	if c.p == nil {
		return nil, ErrClosed
	}
	if batch <= 0 {
		batch = 64
	}
	var chp *C.struct_gxv_comp_channel
	if ch != nil {
		if ch.p == nil {
			return nil, ErrClosed
		}
		chp = ch.p
	}
	wc := (*C.struct_gxv_wc)(C.calloc(C.size_t(batch), C.size_t(unsafe.Sizeof(C.struct_gxv_wc{}))))
	if wc == nil {
		return nil, errnoErr("calloc", syscall.ENOMEM)
	}
	p, errno := C.gxv_create_cq(c.p, C.int(cqe), chp, C.int(vector))
	if p == nil {
		C.free(unsafe.Pointer(wc))
		return nil, errnoErr("ibv_create_cq", asErrno(errno))
	}
	live.cqs.Add(1)
	cq := &CQ{p: p, ch: ch, cqe: int(p.cqe), wc: wc, wcN: batch}
	if ch != nil {
		ch.mu.Lock()
		ch.cqs[p] = cq
		ch.mu.Unlock()
	}
	return cq, nil
}

// CQE is the CQ's actual size.
func (cq *CQ) CQE() int { return cq.cqe }

// Batch is the most completions one Poll returns.
func (cq *CQ) Batch() int { return cq.wcN }

// ReqNotify is ibv_req_notify_cq: the next completion (solicited only, if
// asked) raises one event on the channel.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.p == nil {
		return ErrClosed
	}
	so := C.int(0)
	if solicitedOnly {
		so = 1
	}
	if rc := C.gxv_req_notify_cq(cq.p, so); rc != 0 {
		return errnoErr("ibv_req_notify_cq", syscall.Errno(rc))
	}
	return nil
}

// Ack is ibv_ack_cq_events for n events.
func (cq *CQ) Ack(n int) {
	if cq.p != nil && n > 0 {
		C.gxv_ack_cq_events(cq.p, C.uint(n))
	}
}

// Poll is ibv_poll_cq: up to min(len(out), Batch()) completions in one cgo
// call, converted into out. It returns how many it wrote.
func (cq *CQ) Poll(out []WC) (int, error) {
	n := min(len(out), cq.wcN)
	if n == 0 {
		return 0, nil
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.p == nil {
		return 0, ErrClosed
	}
	r := int(C.gxv_poll_cq(cq.p, C.int(n), cq.wc))
	if r < 0 {
		return 0, errnoErr("ibv_poll_cq", syscall.Errno(-r))
	}
	wcs := unsafe.Slice(cq.wc, r)
	for i := range wcs {
		w := &wcs[i]
		out[i] = WC{
			ID:        uint64(w.wr_id),
			Status:    WCStatus(w.status),
			Opcode:    WCOpcode(w.opcode),
			VendorErr: uint32(w.vendor_err),
			ByteLen:   uint32(w.byte_len),
			Imm:       hton32(uint32(w.imm_data)),
			QPNum:     uint32(w.qp_num),
			SrcQP:     uint32(w.src_qp),
			Flags:     WCFlags(w.wc_flags),
		}
	}
	return r, nil
}

// Close is ibv_destroy_cq. All events must have been acknowledged and no QP
// may use the CQ. A second Close returns nil.
func (cq *CQ) Close() error {
	if cq == nil {
		return nil
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.p == nil {
		return nil
	}
	p := cq.p
	if rc := C.gxv_destroy_cq(p); rc != 0 {
		return errnoErr("ibv_destroy_cq", syscall.Errno(rc))
	}
	cq.p = nil
	if cq.ch != nil {
		cq.ch.mu.Lock()
		delete(cq.ch.cqs, p)
		cq.ch.mu.Unlock()
	}
	C.free(unsafe.Pointer(cq.wc))
	cq.wc = nil
	live.cqs.Add(-1)
	return nil
}

// arena is C memory for one queue's work requests and SGEs.
type arena struct {
	mu     sync.Mutex
	wrs    unsafe.Pointer // cap send or recv WRs
	sges   *C.struct_gxv_sge
	cap    int
	maxSGE int
}

const maxArenaWRs = 256

func newArena(wrSize uintptr, wrs, maxSGE int) (*arena, error) {
	wrs = max(1, min(wrs, maxArenaWRs))
	maxSGE = max(1, maxSGE)
	a := &arena{cap: wrs, maxSGE: maxSGE}
	a.wrs = C.calloc(C.size_t(wrs), C.size_t(wrSize))
	a.sges = (*C.struct_gxv_sge)(C.calloc(C.size_t(wrs*maxSGE), C.size_t(unsafe.Sizeof(C.struct_gxv_sge{}))))
	if a.wrs == nil || a.sges == nil {
		a.free()
		return nil, errnoErr("calloc", syscall.ENOMEM)
	}
	return a, nil
}

func (a *arena) free() {
	if a == nil {
		return
	}
	C.free(a.wrs)
	C.free(unsafe.Pointer(a.sges))
	a.wrs, a.sges = nil, nil
}

// QP is a queue pair with C arenas for its send and receive chains.
type QP struct {
	p          *C.struct_gxv_qp
	qpn        uint32
	cap        QPCap
	send, recv *arena
}

// CreateQP is ibv_create_qp; the created QP is in RESET.
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) {
	if pd.p == nil {
		return nil, ErrClosed
	}
	if a.SendCQ == nil || a.SendCQ.p == nil {
		return nil, errnoErr("ibv_create_qp: send CQ", syscall.EINVAL)
	}
	if a.RecvCQ == nil {
		a.RecvCQ = a.SendCQ
	}
	if a.RecvCQ.p == nil {
		return nil, errnoErr("ibv_create_qp: recv CQ", syscall.EINVAL)
	}
	if a.Type == 0 {
		a.Type = QPTypeRC
	}
	var ia C.struct_gxv_qp_init_attr
	ia.send_cq = a.SendCQ.p
	ia.recv_cq = a.RecvCQ.p
	ia.cap = C.struct_gxv_qp_cap{
		max_send_wr:     C.uint32_t(a.Cap.MaxSendWR),
		max_recv_wr:     C.uint32_t(a.Cap.MaxRecvWR),
		max_send_sge:    C.uint32_t(a.Cap.MaxSendSGE),
		max_recv_sge:    C.uint32_t(a.Cap.MaxRecvSGE),
		max_inline_data: C.uint32_t(a.Cap.MaxInlineData),
	}
	ia.qp_type = C.uint32_t(a.Type)
	if a.SigAll {
		ia.sq_sig_all = 1
	}
	p, errno := C.gxv_create_qp(pd.p, &ia)
	if p == nil {
		return nil, errnoErr("ibv_create_qp", asErrno(errno))
	}
	qp := &QP{p: p, qpn: uint32(p.qp_num), cap: QPCap{
		MaxSendWR:     uint32(ia.cap.max_send_wr),
		MaxRecvWR:     uint32(ia.cap.max_recv_wr),
		MaxSendSGE:    uint32(ia.cap.max_send_sge),
		MaxRecvSGE:    uint32(ia.cap.max_recv_sge),
		MaxInlineData: uint32(ia.cap.max_inline_data),
	}}
	var err error
	if qp.send, err = newArena(unsafe.Sizeof(C.struct_gxv_send_wr{}), int(qp.cap.MaxSendWR), int(qp.cap.MaxSendSGE)); err == nil {
		qp.recv, err = newArena(unsafe.Sizeof(C.struct_gxv_recv_wr{}), int(qp.cap.MaxRecvWR), int(qp.cap.MaxRecvSGE))
	}
	live.qps.Add(1)
	if err != nil {
		_ = qp.Close()
		return nil, err
	}
	return qp, nil
}

// QPN is the queue pair number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Cap is the capacity the device granted.
func (qp *QP) Cap() QPCap { return qp.cap }

// Modify is ibv_modify_qp with the attributes selected by mask.
func (qp *QP) Modify(a *QPAttr, mask QPAttrMask) error {
	if qp.p == nil {
		return ErrClosed
	}
	var c C.struct_gxv_qp_attr
	c.qp_state = C.uint32_t(a.State)
	c.cur_qp_state = C.uint32_t(a.CurState)
	c.path_mtu = C.uint32_t(a.PathMTU)
	c.qkey = C.uint32_t(a.QKey)
	c.rq_psn = C.uint32_t(a.RQPSN)
	c.sq_psn = C.uint32_t(a.SQPSN)
	c.dest_qp_num = C.uint32_t(a.DestQPN)
	c.qp_access_flags = C.uint(a.AccessFlags)
	c.cap = C.struct_gxv_qp_cap{
		max_send_wr: C.uint32_t(a.Cap.MaxSendWR), max_recv_wr: C.uint32_t(a.Cap.MaxRecvWR),
		max_send_sge: C.uint32_t(a.Cap.MaxSendSGE), max_recv_sge: C.uint32_t(a.Cap.MaxRecvSGE),
		max_inline_data: C.uint32_t(a.Cap.MaxInlineData),
	}
	for i, b := range a.AH.DGID {
		c.ah_attr.grh.dgid.raw[i] = C.uint8_t(b)
	}
	c.ah_attr.grh.flow_label = C.uint32_t(a.AH.FlowLabel)
	c.ah_attr.grh.sgid_index = C.uint8_t(a.AH.SGIDIndex)
	c.ah_attr.grh.hop_limit = C.uint8_t(a.AH.HopLimit)
	c.ah_attr.grh.traffic_class = C.uint8_t(a.AH.TrafficClass)
	c.ah_attr.dlid = C.uint16_t(a.AH.DLID)
	c.ah_attr.sl = C.uint8_t(a.AH.SL)
	c.ah_attr.src_path_bits = C.uint8_t(a.AH.SrcPathBits)
	c.ah_attr.static_rate = C.uint8_t(a.AH.StaticRate)
	if a.AH.IsGlobal {
		c.ah_attr.is_global = 1
	}
	c.ah_attr.port_num = C.uint8_t(a.AH.PortNum)
	c.pkey_index = C.uint16_t(a.PKeyIndex)
	c.max_rd_atomic = C.uint8_t(a.MaxRDAtomic)
	c.max_dest_rd_atomic = C.uint8_t(a.MaxDestRDAtomic)
	c.min_rnr_timer = C.uint8_t(a.MinRNRTimer)
	c.port_num = C.uint8_t(a.PortNum)
	c.timeout = C.uint8_t(a.Timeout)
	c.retry_cnt = C.uint8_t(a.RetryCnt)
	c.rnr_retry = C.uint8_t(a.RNRRetry)
	if rc := C.gxv_modify_qp(qp.p, &c, C.int(mask)); rc != 0 {
		return errnoErr(fmt.Sprintf("ibv_modify_qp(to %v, mask %#x)", a.State, uint32(mask)), syscall.Errno(rc))
	}
	return nil
}

// Query is ibv_query_qp for the attributes in mask.
func (qp *QP) Query(mask QPAttrMask) (QPAttr, error) {
	if qp.p == nil {
		return QPAttr{}, ErrClosed
	}
	var c C.struct_gxv_qp_attr
	var ia C.struct_gxv_qp_init_attr
	if rc := C.gxv_query_qp(qp.p, &c, C.int(mask), &ia); rc != 0 {
		return QPAttr{}, errnoErr("ibv_query_qp", syscall.Errno(rc))
	}
	a := QPAttr{
		State: QPState(c.qp_state), CurState: QPState(c.cur_qp_state), PathMTU: MTU(c.path_mtu),
		QKey: uint32(c.qkey), RQPSN: uint32(c.rq_psn), SQPSN: uint32(c.sq_psn), DestQPN: uint32(c.dest_qp_num),
		AccessFlags: Access(c.qp_access_flags),
		Cap: QPCap{
			MaxSendWR: uint32(c.cap.max_send_wr), MaxRecvWR: uint32(c.cap.max_recv_wr),
			MaxSendSGE: uint32(c.cap.max_send_sge), MaxRecvSGE: uint32(c.cap.max_recv_sge),
			MaxInlineData: uint32(c.cap.max_inline_data),
		},
		PKeyIndex: uint16(c.pkey_index), MaxRDAtomic: uint8(c.max_rd_atomic),
		MaxDestRDAtomic: uint8(c.max_dest_rd_atomic), MinRNRTimer: uint8(c.min_rnr_timer),
		PortNum: uint8(c.port_num), Timeout: uint8(c.timeout), RetryCnt: uint8(c.retry_cnt), RNRRetry: uint8(c.rnr_retry),
	}
	for i := range a.AH.DGID {
		a.AH.DGID[i] = byte(c.ah_attr.grh.dgid.raw[i])
	}
	a.AH.FlowLabel = uint32(c.ah_attr.grh.flow_label)
	a.AH.SGIDIndex = uint8(c.ah_attr.grh.sgid_index)
	a.AH.HopLimit = uint8(c.ah_attr.grh.hop_limit)
	a.AH.TrafficClass = uint8(c.ah_attr.grh.traffic_class)
	a.AH.DLID = uint16(c.ah_attr.dlid)
	a.AH.SL = uint8(c.ah_attr.sl)
	a.AH.IsGlobal = c.ah_attr.is_global != 0
	a.AH.PortNum = uint8(c.ah_attr.port_num)
	return a, nil
}

// checkSGEs refuses a WR with more SGEs than the QP takes.
func checkSGEs(op string, i, n, max int) error {
	if n > max {
		return errnoErr(fmt.Sprintf("%s: WR %d has %d SGEs, QP takes %d", op, i, n, max), syscall.EINVAL)
	}
	return nil
}

// putSGEs copies sges into the arena at cs[si:] and returns the C list
// pointer (nil when there are none) and the next free index.
func putSGEs(cs []C.struct_gxv_sge, si int, sges []SGE) (*C.struct_gxv_sge, int) {
	if len(sges) == 0 {
		return nil, si
	}
	first := &cs[si]
	for _, s := range sges {
		cs[si] = C.struct_gxv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
		si++
	}
	return first, si
}

// PostSend posts wrs as chains of work requests built in the QP's C arena:
// one cgo call per up to 256 WRs. It returns how many were posted; on error
// the WR at that index and all after it were not.
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	a := qp.send
	if a == nil {
		return 0, ErrClosed
	}
	for i := range wrs {
		if err := checkSGEs("post_send", i, len(wrs[i].SGE), a.maxSGE); err != nil {
			return 0, err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if qp.p == nil {
		return 0, ErrClosed
	}
	posted := 0
	for posted < len(wrs) {
		chunk := wrs[posted:]
		if len(chunk) > a.cap {
			chunk = chunk[:a.cap]
		}
		cw := unsafe.Slice((*C.struct_gxv_send_wr)(a.wrs), len(chunk))
		cs := unsafe.Slice(a.sges, a.cap*a.maxSGE)
		si := 0
		for i := range chunk {
			w, c := &chunk[i], &cw[i]
			c.wr_id = C.uint64_t(w.ID)
			if i+1 < len(chunk) {
				c.next = &cw[i+1]
			} else {
				c.next = nil
			}
			c.num_sge = C.int(len(w.SGE))
			c.sg_list, si = putSGEs(cs, si, w.SGE)
			c.opcode = C.uint32_t(w.Opcode)
			c.send_flags = C.uint32_t(w.Flags)
			c.imm_data = C.uint32_t(hton32(w.Imm))
			c.wr.remote_addr = C.uint64_t(w.RemoteAddr)
			c.wr.rkey = C.uint32_t(w.RKey)
		}
		if r := int64(C.gxv_post_send(qp.p, &cw[0])); r != 0 {
			return posted + int(uint32(r)), errnoErr("ibv_post_send", syscall.Errno(r>>32))
		}
		posted += len(chunk)
	}
	return posted, nil
}

// PostRecv posts wrs like PostSend.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	a := qp.recv
	if a == nil {
		return 0, ErrClosed
	}
	for i := range wrs {
		if err := checkSGEs("post_recv", i, len(wrs[i].SGE), a.maxSGE); err != nil {
			return 0, err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if qp.p == nil {
		return 0, ErrClosed
	}
	posted := 0
	for posted < len(wrs) {
		chunk := wrs[posted:]
		if len(chunk) > a.cap {
			chunk = chunk[:a.cap]
		}
		cw := unsafe.Slice((*C.struct_gxv_recv_wr)(a.wrs), len(chunk))
		cs := unsafe.Slice(a.sges, a.cap*a.maxSGE)
		si := 0
		for i := range chunk {
			w, c := &chunk[i], &cw[i]
			c.wr_id = C.uint64_t(w.ID)
			if i+1 < len(chunk) {
				c.next = &cw[i+1]
			} else {
				c.next = nil
			}
			c.num_sge = C.int(len(w.SGE))
			c.sg_list, si = putSGEs(cs, si, w.SGE)
		}
		if r := int64(C.gxv_post_recv(qp.p, &cw[0])); r != 0 {
			return posted + int(uint32(r)), errnoErr("ibv_post_recv", syscall.Errno(r>>32))
		}
		posted += len(chunk)
	}
	return posted, nil
}

// Close is ibv_destroy_qp. A second Close returns nil.
func (qp *QP) Close() error {
	if qp == nil || qp.p == nil {
		return nil
	}
	// Take both arena locks so no post is in flight.
	if qp.send != nil {
		qp.send.mu.Lock()
		defer qp.send.mu.Unlock()
	}
	if qp.recv != nil {
		qp.recv.mu.Lock()
		defer qp.recv.mu.Unlock()
	}
	if rc := C.gxv_destroy_qp(qp.p); rc != 0 {
		return errnoErr("ibv_destroy_qp", syscall.Errno(rc))
	}
	qp.p = nil
	qp.send.free()
	qp.recv.free()
	live.qps.Add(-1)
	return nil
}
