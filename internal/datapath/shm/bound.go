package shm

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/memcopy"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// bound is a binding over shared memory: the peer's host memory is
// imported once, and each Put or Get is only a copy into or out of its
// mapping, on the caller's goroutine (the hottest path of `gxfer perf`:
// no allocation, no lock, two atomic adds for the close gate).
//
// Its caller (engine.Binding) serialises Close with Do and Flush: they
// hold its lock shared, Close exclusively.
type bound struct {
	p            *Path
	gate         *datapath.Gate
	mine, theirs []byte
	lbuf, rbuf   datapath.Buf
	hc           *memcopy.Copier // the engine's host copier (nil: copy())
	h            *ipc.Handle[*imported]
	closed       bool
}

var _ datapath.Bound = (*bound)(nil)

// Bind prepares copies between local host memory and the peer's host
// memory k names, mapped through a key granting the whole allocation
// (mapKey, or k itself).
func (p *Path) Bind(ctx context.Context, local datapath.Mem, k wire.RemoteKey, mapKey *wire.RemoteKey, deadline time.Time) (datapath.Bound, error) {
	if local.IsGaudi() || k.MemType != wire.MemHost {
		return nil, gxerr.New(gxerr.NotSupported, "bindings are between host buffers (use Put/Get for Gaudi memory)", nil)
	}
	if k.Len != local.Len {
		return nil, gxerr.New(gxerr.Invalid, fmt.Sprintf("length mismatch: local %d, remote %d", local.Len, k.Len), nil)
	}
	if k.Owner != p.c.PeerHello().EngineID {
		return nil, gxerr.New(gxerr.Invalid, "remote key belongs to another engine than "+p.name, nil)
	}
	if !k.Allows(wire.KeyRead | wire.KeyWrite) {
		return nil, gxerr.New(gxerr.Invalid, "remote key does not grant read and write access", nil)
	}
	mk := k // a narrower grant only: importKey refuses it
	if mapKey != nil && !(k.GrantOffset == 0 && k.GrantLen == k.Length) {
		mk = *mapKey
	}
	h, err := p.importKey(ctx, deadline, mk)
	if err != nil {
		return nil, p.importErr(err)
	}
	theirs := h.Value().mem(k.Offset, k.Len)
	if err := theirs.B.Acquire(); err != nil {
		p.t.imports.Put(h)
		return nil, err
	}
	if err := local.B.Acquire(); err != nil {
		theirs.B.Release()
		p.t.imports.Put(h)
		return nil, err
	}
	return &bound{p: p, gate: p.env.Gate(), hc: p.env.Config().HostCopy, mine: local.Host(), theirs: theirs.Host(), lbuf: local.B, rbuf: theirs.B, h: h}, nil
}

// Inline: the copies run on the caller's goroutine.
func (b *bound) Inline() bool { return true }

// check refuses a closed binding or one whose peer memory is gone (the
// exporter freed it, or the peer disconnected).
func (b *bound) check() error {
	if b.closed {
		return gxerr.New(gxerr.Closed, "binding closed", nil)
	}
	if b.h.Gone() || b.h.Value().revoked() {
		if err := b.p.c.Err(); err != nil {
			return err
		}
		if b.h.Value().valid.OwnerGone() {
			return b.p.ownerGone("the binding's buffer")
		}
		return gxerr.New(gxerr.Invalid, b.p.name+": the peer's buffer is no longer exported", nil)
	}
	return nil
}

// checkAfter is the check after a copy: the owner freed the peer's buffer
// before or during it (its validity flag is set), so the bytes may not
// have reached the allocation the key names.
func (b *bound) checkAfter() error {
	if b.h.Value().revoked() {
		if b.h.Value().valid.OwnerGone() {
			return b.p.ownerGone("the binding's buffer")
		}
		return gxerr.New(gxerr.Invalid, b.p.name+": the peer's buffer was freed by its owner", nil)
	}
	return nil
}

// Do copies the local slice into the peer's (put) or back, n times; the
// data is in place on return (wait changes nothing). The binding is
// checked once for all n, and the copies run inside the engine's close
// gate (Close unmaps nothing while they run).
func (b *bound) Do(put bool, n int, _ bool) error {
	if n <= 0 {
		return nil
	}
	// The checks read the peer's validity page, which the engine's Close
	// unmaps once its gate has drained: they run inside the gate, as the
	// copies do.
	if !b.gate.Enter() {
		return gxerr.Closed
	}
	if err := b.check(); err != nil {
		b.gate.Exit()
		return err
	}
	b.gate.Hook()
	dst, src := b.theirs, b.mine
	if !put {
		dst, src = src, dst
	}
	for range n {
		// Slices of equal length, distinct mappings: cannot panic, so no
		// defer for Exit. The kernel is chosen by size (a 1 MiB put stays
		// in cache, where copy() would store non-temporally on AMD) and
		// large ones are split across cores.
		b.hc.Copy(dst, src)
	}
	err := b.checkAfter()
	b.gate.Exit()
	return err
}

// Held is a binding admitted once through the engine's close gate for a
// run of Puts or Gets on one goroutine (engine.Binding.Hold): each
// operation is then the binding's checks (loads) and the copy, with no
// atomic read-modify-write and no indirect call, as a UCT endpoint's
// put_short is a memcpy into the peer's segment. While held, the engine's
// Close waits in its gate drain: Do fails with gxerr.Closed once the
// engine is closing, and the holder must Release then (or whenever it
// stops). Not safe for concurrent use.
type Held struct {
	b *bound
	// What each Do reads, resolved at Hold: the engine's closing flag,
	// the import's, the owner's validity flag (held: none goes away).
	gate  *datapath.Gate
	gone  *atomic.Bool
	valid *ipc.ValidityView
	// small: the copies take copy() (memmove) whatever the copier
	// (Copier.Copy would, below its temporal and split thresholds), with
	// no call to decide it.
	small    bool
	released bool
}

// Hold checks the binding and admits it through the engine's close gate
// until Release. The caller (engine.Binding) holds its lock shared.
func (b *bound) Hold() (*Held, error) {
	if !b.gate.Enter() {
		return nil, gxerr.Closed
	}
	if err := b.check(); err != nil {
		b.gate.Exit()
		return nil, err
	}
	return &Held{b: b, gate: b.gate, gone: b.h.GoneFlag(), valid: b.h.Value().valid, small: b.hc.Small(len(b.mine))}, nil
}

// Do copies the local slice into the peer's (put) or back, once. The data
// is in place on return: a Put's bytes are in the peer's memory, where
// its loads see them (coherent shared memory: no completion step).
func (h *Held) Do(put bool) error {
	if h.released || h.gate.Closing() {
		return gxerr.Closed
	}
	if h.gone.Load() || h.valid.Revoked() {
		return h.b.check()
	}
	h.gate.Hook()
	dst, src := h.b.theirs, h.b.mine
	if !put {
		dst, src = src, dst
	}
	if h.small {
		copy(dst, src)
	} else {
		h.b.hc.Copy(dst, src)
	}
	if h.valid.Revoked() {
		return h.b.checkAfter()
	}
	return nil
}

// Release ends the hold (the engine's Close may then proceed).
// Idempotent.
func (h *Held) Release() {
	if h.released {
		return
	}
	h.released = true
	h.b.gate.Exit()
}

// Flush has nothing to wait for: every copy is done when Do returns.
func (b *bound) Flush() error {
	if !b.gate.Enter() { // check reads the validity page (see Do)
		return gxerr.Closed
	}
	defer b.gate.Exit()
	return b.check()
}

// Close releases the buffers and the import (after Do calls in progress
// return). Idempotent.
func (b *bound) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.lbuf.Release()
	b.rbuf.Release()
	b.p.t.imports.Put(b.h)
	return nil
}
