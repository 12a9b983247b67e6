package rdmapath

import (
	"context"
	"errors"
	"sync"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/rdma"
)

// The fence behind engine.Endpoint.Send: a message sent on the control
// connection after a Put completed must reach the peer after the Put's
// bytes are visible to the peer's CPU.
//
// A Put's RDMA writes complete (their work completions) once the
// responder acknowledged them, which says they were received and will be
// executed, not that their data has reached the peer's memory: it may
// still be in the responder NIC or on its PCIe path when the peer's CPU
// reads the message that arrived by TCP.
//
// So, before the message, each queue pair that posted RDMA writes of this
// side's Puts since its last fence performs an RDMA READ of a few bytes
// of the peer memory its last write went to (a region the peer registered
// and keyed for us; its registration grants remote reads: AccessDefault)
// into a small registered scratch of ours, and the Send waits for it. We
// rely on:
//
//   - IBA Vol. 1, chapter 9 (transport layer), RC: the responder executes
//     the requests of a queue pair in packet sequence order, an RDMA READ
//     after the RDMA WRITEs before it, and a READ's response carries the
//     memory contents as of its execution;
//   - the responder NIC's memory read for the READ not passing its
//     earlier posted memory writes (PCIe ordering: a non-posted request
//     does not pass posted writes in the same direction), so the READ's
//     response leaves the responder only once the writes are in the
//     peer's memory, coherent for its CPU.
//
// IBA itself defines execution order at the transport, not placement in
// host memory; the second point is what the common "read after write"
// flush relies on, and what RDMA FLUSH (IBA 1.5) later made an operation
// of its own. It would not hold for a region registered with relaxed
// ordering (the peer's regions are not). The fence is per queue pair:
// writes on another queue pair are not ordered by this READ, hence one
// READ on every queue pair that wrote.
//
// Writes this side performs for the peer's delegated Gets are fenced the
// same way, by the server, before it answers on the control connection
// (readBack): the requester reads its region as soon as the answer
// arrives.

// fenceState is a queue pair's writes since its last fence.
type fenceState struct {
	mu    sync.Mutex
	wrote bool
	last  rdma.RemoteAddr // where the last write went
	n     uint64          // bytes the READ takes there (1..fenceRead)
}

const fenceRead = 8

// noteWrite records that a write of n bytes to remote was posted on cn
// for one of this side's Puts (after posting it: a fence posted later is
// behind it in the send queue).
func (cn *conn) noteWrite(remote rdma.RemoteAddr, n uint64) {
	if n == 0 {
		return
	}
	cn.fence.mu.Lock()
	cn.fence.wrote, cn.fence.last, cn.fence.n = true, remote, min(n, fenceRead)
	cn.fence.mu.Unlock()
}

// takeWrite clears the queue pair's state, returning it.
func (cn *conn) takeWrite() (rdma.RemoteAddr, uint64, bool) {
	cn.fence.mu.Lock()
	defer cn.fence.mu.Unlock()
	if !cn.fence.wrote {
		return rdma.RemoteAddr{}, 0, false
	}
	cn.fence.wrote = false
	return cn.fence.last, cn.fence.n, true
}

// restoreWrite puts back a fence that did not happen (unless a newer
// write was noted meanwhile).
func (cn *conn) restoreWrite(remote rdma.RemoteAddr, n uint64) {
	cn.fence.mu.Lock()
	if !cn.fence.wrote {
		cn.fence.wrote, cn.fence.last, cn.fence.n = true, remote, n
	}
	cn.fence.mu.Unlock()
}

var _ datapath.Fencer = (*Path)(nil)

// Fence returns once the bytes of every RDMA write this side's Puts
// posted before it are in the peer's memory (see the top of this file).
// ctx bounds the waits for send credits and the scratch; a READ posted is
// waited for (the peer answers it, or the queue pair fails and it
// flushes).
func (p *Path) Fence(ctx context.Context) error {
	type taken struct {
		cn  *conn
		ref rdma.MRRef
	}
	var (
		waits []func() error
		refs  []taken
		held  bool
		err   error
	)
	for _, cn := range p.conns {
		remote, n, ok := cn.takeWrite()
		if !ok {
			continue
		}
		if !held {
			if err = p.t.acquireScratch(); err != nil {
				cn.restoreWrite(remote, n)
				break
			}
			held = true
		}
		r, e := p.scratchRef(cn)
		if e != nil {
			cn.restoreWrite(remote, n)
			err = e
			break
		}
		refs = append(refs, taken{cn, r})
		w, e := p.postOne(ctx, cn, rdma.OpRead, r.Seg(p.t.scratch.Addr(), n), remote)
		if e != nil { // not posted (ctx ended waiting for a credit): the next fence does it
			cn.restoreWrite(remote, n)
			err = e
			break
		}
		waits = append(waits, w)
	}
	var errs []error
	for _, w := range waits {
		errs = append(errs, w())
	}
	for _, r := range refs {
		r.cn.n.mrs.Put(r.ref)
	}
	if held {
		p.t.scratch.Release()
	}
	if err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		if f := p.c.Err(); f != nil {
			return f
		}
		return err
	}
	return nil
}

// scratchRef is the held scratch's registration on cn's NIC.
func (p *Path) scratchRef(cn *conn) (rdma.MRRef, error) {
	s := p.t.scratch
	r, err := cn.n.mrs.Get(s.Addr(), s.Len(), rdma.AccessLocalWrite)
	if err != nil {
		return rdma.MRRef{}, gxerr.New(gxerr.NotSupported, "RDMA registration of the fence's scratch", err)
	}
	return r, nil
}

// readBack fences the writes this side posted on cn into the peer's
// region at remote for one of its delegated Gets: one READ of n bytes
// (1..fenceRead) there, waited for, before the request is answered.
func (p *Path) readBack(cn *conn, remote rdma.RemoteAddr, n uint64) error {
	if err := p.t.acquireScratch(); err != nil {
		return err
	}
	defer p.t.scratch.Release()
	r, err := p.scratchRef(cn)
	if err != nil {
		return err
	}
	defer cn.n.mrs.Put(r)
	return p.one(context.Background(), cn, rdma.OpRead, r.Seg(p.t.scratch.Addr(), n), remote)()
}

// acquireScratch makes the transport's fence scratch (once) and holds it
// until Release.
func (t *Transport) acquireScratch() error {
	t.scratchMu.Lock()
	if t.scratchClosed {
		t.scratchMu.Unlock()
		return gxerr.New(gxerr.Closed, "RDMA transport closed", nil)
	}
	if t.scratch == nil {
		b, err := t.env.AllocHost(64)
		if err != nil {
			t.scratchMu.Unlock()
			return err
		}
		t.scratch = b
	}
	b := t.scratch
	t.scratchMu.Unlock()
	return b.Acquire()
}

// freeScratch frees the fence scratch (Close).
func (t *Transport) freeScratch() error {
	t.scratchMu.Lock()
	t.scratchClosed = true
	b := t.scratch
	t.scratchMu.Unlock()
	if b == nil {
		return nil
	}
	for _, n := range t.nics {
		n.mrs.Invalidate(b.Addr(), b.Len())
	}
	return t.env.FreeHost(b)
}
