package shm

import (
	"context"
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
	sc := p.listScratch(len(reqs))
	defer p.putListScratch(sc)
	pieces := sc.pieces
	var last *ipc.Handle[*imported] // the import of the piece before
	var lastAlloc, lastGen uint64   // its key's
	for i := range reqs {
		r := &reqs[i]
		mk := mapKey(r)
		if mk == nil || r.Local.IsGaudi() || !p.t.mappable(mk) {
			p.Start(ctx, *r, &listElem{c: c, i: i})
			continue
		}
		// Pieces of one allocation (the usual list) share its import:
		// one lookup and reference for the run of them.
		h := last
		// A piece whose key may not use it (importMismatch) is imported,
		// and refused, on its own.
		if h == nil || lastAlloc != mk.AllocID || lastGen != mk.Generation || importMismatch(h, *mk) != "" {
			var err error
			if h, err = p.importKey(ctx, r.Deadline, *mk); err != nil {
				c.Complete(i, p.importErr(err))
				continue
			}
			sc.handles = append(sc.handles, h)
			lastAlloc, lastGen = mk.AllocID, mk.Generation
		}
		last = h
		pieces = pieces[:len(pieces)+1]
		pc := &pieces[len(pieces)-1]
		pc.i, pc.h, pc.local, pc.theirs = i, h, r.Local, h.Value().mem(r.Key.Offset, r.Key.Len)
	}
	sc.pieces = pieces
	if len(pieces) == 0 {
		return
	}
	first := &reqs[pieces[0].i] // every request has the same direction and deadline
	p.copyList(ctx, first.Put, first.Deadline, reqs, sc, c)
}

// listScratch is the slices of a list's copy job, reused (a list is
// copied on its caller's goroutine: nothing keeps them after StartList).
type listScratch struct {
	pieces     []listPiece
	dsts, srcs [][]byte
	handles    []*ipc.Handle[*imported] // the references the pieces share
	held       []datapath.Buf           // the buffers held for the copy
	ok         []int
	failed     []failedPiece
}

func (p *Path) listScratch(n int) *listScratch {
	if sc, _ := p.t.listPool.Get().(*listScratch); sc != nil && cap(sc.pieces) >= n {
		return sc
	}
	return &listScratch{pieces: make([]listPiece, 0, n)}
}

// putListScratch takes the slices back. The per-piece ones are not
// cleared (StartList and copyList set every element they use; clearing
// them, evicted by the copy, would delay the list's completion): what
// they point at stays reachable only until they are reused or a GC
// empties the pool.
func (p *Path) putListScratch(sc *listScratch) {
	p.dropImports(sc) // a list none of whose pieces reached copyList
	clear(sc.held)
	clear(sc.failed)
	sc.pieces, sc.dsts, sc.srcs, sc.held, sc.ok, sc.failed = sc.pieces[:0], sc.dsts[:0], sc.srcs[:0], sc.held[:0], sc.ok[:0], sc.failed[:0]
	p.t.listPool.Put(sc)
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

// copyList copies the pieces as one job and completes each. The pieces
// share the imports in sc.handles (one reference each, dropped here
// before any piece completes), and each distinct buffer is held once for
// the copy.
func (p *Path) copyList(ctx context.Context, put bool, deadline time.Time, reqs []datapath.Req, sc *listScratch, c datapath.Completer) {
	pieces := sc.pieces
	fail := func(err error) {
		p.dropImports(sc)
		for _, f := range sc.failed {
			c.Complete(f.i, f.err)
		}
		for _, pc := range pieces {
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
	// Hold both sides of every piece, each buffer once for a run of
	// pieces in it: a freed buffer (or import) fails its pieces only.
	if cap(sc.dsts) < len(pieces) {
		sc.dsts, sc.srcs = make([][]byte, len(pieces)), make([][]byte, len(pieces))
	}
	dsts, srcs := sc.dsts[:len(pieces)], sc.srcs[:len(pieces)]
	sc.dsts, sc.srcs = dsts, srcs // cleared when the scratch is put back
	held := 0
	var total uint64
	var local, theirs holdRun
	var lastH *ipc.Handle[*imported]
	for k := range pieces {
		pc := &pieces[k]
		if pc.h != lastH { // a run of pieces in one import: checked once
			lastH = pc.h
			theirs.revoked = pc.h.Value().revoked()
		}
		lb, tb, err := p.holdPiece(sc, &reqs[pc.i], pc, &local, &theirs)
		if err != nil {
			sc.failed = append(sc.failed, failedPiece{pc.i, err})
			continue
		}
		if held != k {
			pieces[held] = *pc
		}
		if put {
			dsts[held], srcs[held] = tb, lb
		} else {
			dsts[held], srcs[held] = lb, tb
		}
		total += pc.local.Len
		held++
	}
	pieces, dsts, srcs = pieces[:held], dsts[:held], srcs[:held]
	release := func() {
		for _, b := range sc.held {
			b.Release()
		}
	}
	if len(pieces) > 0 && !p.env.Enter() { // Close unmaps nothing while the copy runs
		release()
		fail(gxerr.New(gxerr.Closed, "engine closing", nil))
		return
	}
	if len(pieces) > 0 {
		// Slices of equal lengths: cannot panic, no defer for Exit.
		p.env.Config().HostCopy.CopyV(dsts, srcs)
		p.env.Exit()
		release()
		if h := p.t.hooks.ListCopied; h != nil {
			h(len(pieces), total)
		}
		p.env.CountInline(uint64(len(pieces)), total)
	}
	// A piece whose allocation the owner freed before or during the copy
	// fails; the others end together.
	var last *ipc.Handle[*imported]
	revoked := false
	for k := range pieces {
		pc := &pieces[k]
		if pc.h != last {
			last, revoked = pc.h, pc.h.Value().revoked()
		}
		if revoked {
			sc.failed = append(sc.failed, failedPiece{pc.i, p.staleImport(pc.h.Value(), &reqs[pc.i].Key)})
			continue
		}
		sc.ok = append(sc.ok, pc.i)
	}
	p.dropImports(sc)
	for _, f := range sc.failed {
		c.Complete(f.i, f.err)
	}
	if mc, many := c.(datapath.ManyCompleter); many {
		mc.CompleteOK(sc.ok)
		return
	}
	for _, i := range sc.ok {
		c.Complete(i, nil)
	}
}

// failedPiece is a piece that failed: its request's index and why.
type failedPiece struct {
	i   int
	err error
}

// holdRun is the buffer of the run of pieces before (nil: none), the
// outcome of holding it and its bytes; for the peer's side, whether the
// run's import was revoked.
type holdRun struct {
	b       datapath.Buf
	bytes   []byte
	err     error
	revoked bool
}

// hold holds b unless it is the run's buffer (held, or refused, already),
// and returns its host bytes.
func (r *holdRun) hold(sc *listScratch, b datapath.Buf) ([]byte, error) {
	if r.b != nil && b == r.b {
		return r.bytes, r.err
	}
	r.b, r.bytes, r.err = b, nil, b.Acquire()
	if r.err != nil {
		return nil, r.err
	}
	sc.held = append(sc.held, b)
	if r.bytes = b.HostBytes(); r.bytes == nil {
		r.err = gxerr.New(gxerr.Invalid, "list element: memory without host bytes", nil)
	}
	return r.bytes, r.err
}

// dropImports drops the list's references to its imports (once).
func (p *Path) dropImports(sc *listScratch) {
	for _, h := range sc.handles {
		p.t.imports.Put(h)
	}
	clear(sc.handles)
	sc.handles = sc.handles[:0]
}

// holdPiece holds both buffers of a piece, refusing an allocation its
// owner freed already, and returns their bytes the piece names.
func (p *Path) holdPiece(sc *listScratch, r *datapath.Req, pc *listPiece, local, theirs *holdRun) (lb, tb []byte, err error) {
	if theirs.revoked {
		return nil, nil, p.staleImport(pc.h.Value(), &r.Key)
	}
	if lb, err = local.hold(sc, pc.local.B); err != nil {
		return nil, nil, err
	}
	if tb, err = theirs.hold(sc, pc.theirs.B); err != nil {
		return nil, nil, err
	}
	return lb[pc.local.Off : pc.local.Off+pc.local.Len], tb[pc.theirs.Off : pc.theirs.Off+pc.theirs.Len], nil
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
