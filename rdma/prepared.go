package rdma

import (
	"fmt"

	"github.com/gxfer/gxfer/internal/verbs"
)

// Prepared is one send work request checked and built once, for a caller
// that posts the same request again and again (a binding's write or
// read): PostPrepared then skips what Post does per call for each work
// request (its checks, its gather list and the request's C form, built
// once by the verbs binding and only given a new wr_id per post). The MRs
// of its segments must stay registered while it is posted: the caller
// holds them. Free releases its C memory; the QP's Close releases what is
// left.
type Prepared struct {
	qp  *QP
	rec slotRec
	vp  *verbs.PreparedSend
}

// Prepare checks w as Post checks each of its work requests and builds it
// for PostPrepared on qp.
func (qp *QP) Prepare(w WR) (*Prepared, error) {
	if err := qp.checkWR(&w); err != nil {
		return nil, fmt.Errorf("rdma: prepare WR: %w", err)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closing.Load() {
		return nil, ErrClosed
	}
	vw, _ := sendWR(&w, nil, 0)
	vp, err := qp.v.PrepareSend(vw)
	if err != nil {
		return nil, fmt.Errorf("rdma: prepare WR on QP %d: %w", qp.local.QPN, err)
	}
	return &Prepared{qp: qp, rec: slotRec{done: w.Done, qp: qp, op: w.Op}, vp: vp}, nil
}

// PostPrepared posts p, prepared on qp, as Post posts one work request
// (one cgo call): its Completer is called once with the completion. On an
// error nothing was posted and the Completer is not called; a full send
// queue or CQ is ErrQueueFull, a closing QP or a freed p ErrClosed.
func (qp *QP) PostPrepared(p *Prepared) error {
	if p == nil || p.qp != qp {
		return fmt.Errorf("%w: work request not prepared on this QP", ErrInvalid)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if p.vp == nil {
		return ErrClosed
	}
	recs, ids := [1]slotRec{p.rec}, [1]uint64{}
	if err := qp.reserveSend(recs[:], ids[:]); err != nil {
		return err
	}
	qp.sendBegin(1)
	posted := 0
	err := qp.v.PostPrepared(p.vp, ids[0])
	if err == nil {
		posted = 1
	}
	_, err = qp.sendEnd(ids[:], posted, err)
	return err
}

// Free releases p: later posts of it fail with ErrClosed. Idempotent; not
// concurrent with a post of p.
func (p *Prepared) Free() {
	if p == nil {
		return
	}
	p.qp.mu.Lock()
	defer p.qp.mu.Unlock()
	if p.vp != nil {
		p.vp.Free()
		p.vp = nil
	}
}
