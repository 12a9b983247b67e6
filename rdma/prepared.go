package rdma

import (
	"fmt"

	"github.com/gxfer/gxfer/internal/verbs"
)

// Prepared is one send work request checked and built once, for a caller
// that posts the same request again and again (a binding's write or
// read): PostPrepared then skips what Post does per call for each work
// request (its checks, its gather list and its verbs form built anew). The
// MRs of its segments must stay registered while it is posted: the caller
// holds them.
type Prepared struct {
	qp  *QP
	rec slotRec
	vw  [1]verbs.SendWR // its ID set by each post, under the QP's lock
}

// Prepare checks w as Post checks each of its work requests and builds it
// for PostPrepared on qp.
func (qp *QP) Prepare(w WR) (*Prepared, error) {
	if err := qp.checkWR(&w); err != nil {
		return nil, fmt.Errorf("rdma: prepare WR: %w", err)
	}
	p := &Prepared{qp: qp, rec: slotRec{done: w.Done, qp: qp, op: w.Op}}
	p.vw[0], _ = sendWR(&w, nil, 0)
	return p, nil
}

// PostPrepared posts p, prepared on qp, as Post posts one work request
// (one cgo call): its Completer is called once with the completion. On an
// error nothing was posted and the Completer is not called; a full send
// queue or CQ is ErrQueueFull, a closing QP ErrClosed.
func (qp *QP) PostPrepared(p *Prepared) error {
	if p == nil || p.qp != qp {
		return fmt.Errorf("%w: work request not prepared on this QP", ErrInvalid)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	recs, ids := [1]slotRec{p.rec}, [1]uint64{}
	if err := qp.reserveSend(recs[:], ids[:]); err != nil {
		return err
	}
	p.vw[0].ID = ids[0]
	_, err := qp.sendReserved(p.vw[:], ids[:])
	return err
}
