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

// Completion channels and completion queues.

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
