//go:build linux && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"
)

// Queue pairs: creation, state transitions and posting work requests
// from C arenas.

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
	prepared   map[*PreparedSend]struct{} // send arena's mu
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

// putSendWR writes w, but for its wr_id and next, into c, and its SGEs
// into cs at si; it returns the next free SGE index.
func putSendWR(c *C.struct_gxv_send_wr, w *SendWR, cs []C.struct_gxv_sge, si int) int {
	c.num_sge = C.int(len(w.SGE))
	c.sg_list, si = putSGEs(cs, si, w.SGE)
	c.opcode = C.uint32_t(w.Opcode)
	c.send_flags = C.uint32_t(w.Flags)
	c.imm_data = C.uint32_t(hton32(w.Imm))
	c.wr.remote_addr = C.uint64_t(w.RemoteAddr)
	c.wr.rkey = C.uint32_t(w.RKey)
	return si
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
			si = putSendWR(c, w, cs, si)
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
	for p := range qp.prepared {
		p.free()
	}
	qp.send.free()
	qp.recv.free()
	live.qps.Add(-1)
	return nil
}
