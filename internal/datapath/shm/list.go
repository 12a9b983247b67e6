package shm

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

var _ datapath.Lister = (*Path)(nil)

// listPiece is a request of a list copied between local host memory and
// the peer's host memory mapped here.
type listPiece struct {
	i      int // its index in the list
	h      *ipc.Handle[*imported]
	local  datapath.Mem
	theirs datapath.Mem
}

// StartList runs a list of Puts or Gets (datapath.Lister). The requests
// between local host memory and the peer's host memory that a key
// granting the whole allocation maps are one copy job: every mapping is
// resolved first, then all their bytes are copied by one
// memcopy.Copier.CopyV on the caller's goroutine, inside the engine's
// close gate, so the copy kernel is the one of the list's total size and
// the job is split over cores as one large copy is. The others (Gaudi
// memory on either side, a narrower grant) go as Start runs them. Each
// request is completed on its own: a revoked or unmappable allocation
// fails its requests only.
func (p *Path) StartList(ctx context.Context, reqs []datapath.Req, c datapath.Completer) {
	pieces := make([]listPiece, 0, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		mk := mapKey(r)
		if mk == nil || r.Local.IsGaudi() {
			p.Start(ctx, *r, &listElem{c: c, i: i})
			continue
		}
		h, err := p.importKey(ctx, r.Deadline, *mk)
		if err != nil {
			c.Complete(i, p.importErr(err))
			continue
		}
		pieces = append(pieces, listPiece{i: i, h: h, local: r.Local, theirs: h.Value().mem(r.Key.Offset, r.Key.Len)})
	}
	if len(pieces) == 0 {
		return
	}
	first := &reqs[pieces[0].i] // every request has the same direction and deadline
	p.copyList(ctx, first.Put, first.Deadline, reqs, pieces, c)
}

// mapKey is the key that maps the peer's memory of r (one granting the
// whole allocation), nil if r has none or the memory is not host memory.
func mapKey(r *datapath.Req) *wire.RemoteKey {
	if r.Key.MemType != wire.MemHost {
		return nil
	}
	if r.Key.GrantOffset == 0 && r.Key.GrantLen == r.Key.Length {
		return &r.Key
	}
	return r.MapKey
}

// copyList copies the pieces (each holding its import, released here) as
// one job and completes each.
func (p *Path) copyList(ctx context.Context, put bool, deadline time.Time, reqs []datapath.Req, pieces []listPiece, c datapath.Completer) {
	fail := func(err error) {
		for _, pc := range pieces {
			p.t.imports.Put(pc.h)
			c.Complete(pc.i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		fail(gxerr.Ctx(p.name+": list copy dropped before it started", err))
		return
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		fail(gxerr.New(gxerr.Timeout, p.name+": deadline passed before the list copy started", nil))
		return
	}
	// Hold both sides of every piece: a freed buffer (or import) fails
	// its piece only.
	held := pieces[:0]
	for _, pc := range pieces {
		err := p.holdPiece(&reqs[pc.i], &pc)
		if err != nil {
			p.t.imports.Put(pc.h)
			c.Complete(pc.i, err)
			continue
		}
		held = append(held, pc)
	}
	pieces = held
	if len(pieces) == 0 {
		return
	}
	release := func() {
		for _, pc := range pieces {
			pc.local.B.Release()
			pc.theirs.B.Release()
		}
	}
	if !p.env.Enter() { // Close unmaps nothing while the copy runs
		release()
		fail(gxerr.New(gxerr.Closed, "engine closing", nil))
		return
	}
	dsts, srcs := make([][]byte, len(pieces)), make([][]byte, len(pieces))
	var total uint64
	for k, pc := range pieces {
		if put {
			dsts[k], srcs[k] = pc.theirs.Host(), pc.local.Host()
		} else {
			dsts[k], srcs[k] = pc.local.Host(), pc.theirs.Host()
		}
		total += pc.local.Len
	}
	// Slices of equal lengths: cannot panic, no defer for Exit.
	p.env.Config().HostCopy.CopyV(dsts, srcs)
	p.env.Exit()
	release()
	if h := p.t.hooks.ListCopied; h != nil {
		h(len(pieces), total)
	}
	for _, pc := range pieces {
		var err error
		if pc.h.Value().revoked() { // the owner freed it before or during the copy
			err = p.staleImport(&reqs[pc.i].Key)
		}
		p.t.imports.Put(pc.h)
		p.env.CountInline(1, pc.local.Len)
		c.Complete(pc.i, err)
	}
}

// holdPiece acquires both buffers of a piece, refusing an allocation its
// owner freed already.
func (p *Path) holdPiece(r *datapath.Req, pc *listPiece) error {
	if pc.h.Value().revoked() {
		return p.staleImport(&r.Key)
	}
	if pc.local.IsGaudi() || pc.local.B.HostBytes() == nil {
		return gxerr.New(gxerr.Invalid, fmt.Sprintf("list element %d: local memory is not host memory", pc.i), nil)
	}
	if err := pc.local.B.Acquire(); err != nil {
		return err
	}
	if err := pc.theirs.B.Acquire(); err != nil {
		pc.local.B.Release()
		return err
	}
	return nil
}

// listElem completes element i of a list for a request run by Start: once,
// whether by Complete or by CompleteAll (its deadline).
type listElem struct {
	c    datapath.Completer
	i    int
	done atomic.Bool
}

func (e *listElem) Complete(_ int, err error) {
	if e.done.CompareAndSwap(false, true) {
		e.c.Complete(e.i, err)
	}
}

func (e *listElem) CompleteAll(err error) { e.Complete(0, err) }
