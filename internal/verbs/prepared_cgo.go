//go:build linux && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"syscall"
	"unsafe"
)

// PreparedSend is one send work request built once in C memory (the
// request, then its SGEs: one allocation), for a caller that posts the
// same request again and again: PostPrepared sets its wr_id and posts it,
// one cgo call with nothing converted or copied per post. The QP owns it:
// Free frees it, and the QP's Close frees those left.
type PreparedSend struct {
	qp *QP
	wr *C.struct_gxv_send_wr // nil once freed
}

// PrepareSend builds w (its ID is set by each post) for PostPrepared.
func (qp *QP) PrepareSend(w SendWR) (*PreparedSend, error) {
	a := qp.send
	if a == nil {
		return nil, ErrClosed
	}
	if err := checkSGEs("prepare_send", 0, len(w.SGE), a.maxSGE); err != nil {
		return nil, err
	}
	wrSize := unsafe.Sizeof(C.struct_gxv_send_wr{})
	size := wrSize + uintptr(len(w.SGE))*unsafe.Sizeof(C.struct_gxv_sge{})
	a.mu.Lock()
	defer a.mu.Unlock()
	if qp.p == nil {
		return nil, ErrClosed
	}
	mem := C.calloc(1, C.size_t(size))
	if mem == nil {
		return nil, errnoErr("calloc", syscall.ENOMEM)
	}
	c := (*C.struct_gxv_send_wr)(mem)
	sges := unsafe.Slice((*C.struct_gxv_sge)(unsafe.Add(mem, wrSize)), len(w.SGE))
	putSendWR(c, &w, sges, 0)
	p := &PreparedSend{qp: qp, wr: c}
	if qp.prepared == nil {
		qp.prepared = make(map[*PreparedSend]struct{})
	}
	qp.prepared[p] = struct{}{}
	live.preparedSends.Add(1)
	return p, nil
}

// PostPrepared posts p, prepared on qp, with wr_id id (one cgo call). It
// takes no lock: a post of p must not run concurrently with another of p,
// with p's Free or with the QP's Close (package rdma orders them); posts of
// different work requests may.
func (qp *QP) PostPrepared(p *PreparedSend, id uint64) error {
	if p == nil || p.qp != qp {
		return errnoErr("post_send: work request not prepared on this QP", syscall.EINVAL)
	}
	if p.wr == nil || qp.p == nil {
		return ErrClosed
	}
	p.wr.wr_id = C.uint64_t(id)
	if r := int64(C.gxv_post_send(qp.p, p.wr)); r != 0 {
		return errnoErr("ibv_post_send", syscall.Errno(r>>32))
	}
	return nil
}

// Free frees p's C memory; later posts of p fail with ErrClosed.
// Idempotent, and a no-op once the QP is closed (its Close freed p).
func (p *PreparedSend) Free() {
	if p == nil || p.qp == nil || p.qp.send == nil {
		return
	}
	a := p.qp.send
	a.mu.Lock()
	defer a.mu.Unlock()
	p.free()
}

// free (the send arena's mu held) frees p's memory once.
func (p *PreparedSend) free() {
	if p.wr == nil {
		return
	}
	delete(p.qp.prepared, p)
	C.free(unsafe.Pointer(p.wr))
	p.wr = nil
	live.preparedSends.Add(-1)
}
