package shm

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// Importing a peer's host memory over a unix socket: the owner hands the
// memfd of an exported buffer to the peer that asks (serveImport), the
// peer maps it once through the IPC handle cache (importKey) and then
// copies into or out of it directly.

// importTimeout bounds an import (a round trip to the peer).
const importTimeout = 10 * time.Second

// imported is a peer's host buffer mapped into this process, wrapped in an
// engine buffer (Env.WrapHost) so that device DMA can reach it.
type imported struct {
	m     *ipc.Mapping
	valid *ipc.ValidityView // the owner's flag: set once it frees the allocation
	buf   datapath.Buf
	// mac is the MAC of the whole-allocation key the owner accepted for
	// this import: a later key reuses the mapping only if it carries the
	// same MAC (an edited key must not ride on an earlier import).
	mac [wire.MACSize]byte
}

// revoked reports whether the owner freed the allocation.
func (im *imported) revoked() bool { return im.valid.Revoked() }

// mem is n bytes at off of the mapping.
func (im *imported) mem(off, n uint64) datapath.Mem {
	return datapath.Mem{B: im.buf, Off: off, Len: n}
}

// lent is a buffer's record of the peers that mapped it
// (datapath.BufState.IPC).
type lent struct {
	importers map[*Path]struct{}
	gen       uint64 // the generation the peers imported (wire.Invalidate)
}

// serveImport hands the peer the memfd of one of our host buffers. It
// runs on the reader, which never blocks on a peer that does not read: a
// refusal goes to the writer (QueueReply; its error, a full queue, fails
// the endpoint). The reply carries descriptors, which only an inline send
// can: one not sent (the peer did not take it within the write timeout)
// fails the endpoint, as a reply the writer cannot send does, rather than
// leave the peer's import unanswered on an endpoint that looks up.
func (p *Path) serveImport(m *wire.ImportRequest) error {
	c := p.c
	// The memfd is handed over read-write: only a read-write key imports.
	s, st, msg := p.env.Lookup(&m.Key, 0, m.Key.Len, wire.KeyRead|wire.KeyWrite)
	if st == wire.StatusOK && s.B.Shared() == nil {
		st, msg = wire.StatusNotSupported, "not shareable host memory"
	}
	if st == wire.StatusOK && (m.Key.GrantOffset != 0 || m.Key.GrantLen != m.Key.Length) {
		// A mapping reaches the whole allocation: only a key granting all
		// of it imports.
		st, msg = wire.StatusAccess, "the key grants part of the allocation only"
	}
	if st != wire.StatusOK {
		return c.QueueReply(wire.NewError(m.RequestID, st, msg))
	}
	b := s.B
	if err := b.Acquire(); err != nil { // keep the memfd open while it is sent
		return c.QueueReply(wire.NewError(m.RequestID, wire.StatusStale, "buffer no longer exported"))
	}
	defer b.Release()
	v, err := p.lend(b, m.Key.Generation)
	if err != nil {
		return c.QueueReply(wire.NewError(m.RequestID, wire.StatusNoResources, err.Error()))
	}
	// Lookup checked that the key's generation is this engine's.
	rep := &wire.ImportReply{RequestID: m.RequestID, AllocID: b.ID(), Generation: m.Key.Generation,
		Kind: wire.FDMemfd, Size: b.Len()}
	if err := c.Conn().Send(rep, b.Shared().FD(), v.FD()); err != nil {
		p.t.log.Debug().Err(err).Msg("import reply not sent: the endpoint fails")
		c.Fail(c.SendErr(err))
	}
	return nil
}

// lend records that the endpoint's peer maps b (to be told when it is
// freed, and forgotten when the endpoint ends) and returns b's validity
// flag, made on the first import. b is acquired by the caller.
func (p *Path) lend(b datapath.Buf, gen uint64) (*ipc.Validity, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed {
		if err := p.c.Err(); err != nil {
			return nil, err
		}
		return nil, gxerr.New(gxerr.Closed, "endpoint closed", nil)
	}
	st := b.State()
	st.Mu.Lock()
	defer st.Mu.Unlock()
	var v *ipc.Validity
	if x, ok := p.t.validity.Load(b); ok {
		v = x.(*ipc.Validity)
	} else {
		var err error
		if v, err = ipc.NewValidity("gxfer-valid"); err != nil {
			return nil, err
		}
		p.t.validity.Store(b, v)
	}
	// Free marks b freed before it revokes (Transport.Revoke): a Free that
	// found no flag to revoke left b freed, which Acquire sees (the
	// caller's reference keeps this Release from being the last).
	if b.Acquire() != nil {
		v.Revoke()
	} else {
		b.Release()
	}
	ls, _ := st.IPC.(*lent)
	if ls == nil {
		ls = &lent{importers: map[*Path]struct{}{}, gen: gen}
		st.IPC = ls
	}
	ls.importers[p] = struct{}{}
	if p.lent == nil {
		p.lent = map[datapath.Buf]struct{}{}
	}
	p.lent[b] = struct{}{}
	return v, nil
}

// unlend forgets the endpoint in every buffer its peer mapped (the
// endpoint ended; called once it is marked failed, so lend adds no more).
func (p *Path) unlend() {
	p.mu.Lock()
	p.failed = true
	bufs := p.lent
	p.lent = nil
	p.mu.Unlock()
	for b := range bufs {
		st := b.State()
		st.Mu.Lock()
		if ls, ok := st.IPC.(*lent); ok {
			delete(ls.importers, p)
		}
		st.Mu.Unlock()
	}
}

// importKey maps a peer's shared host buffer through the IPC handle cache.
//
// ctx and deadline bound an import (a round trip to the peer); a cache hit
// costs no context or timer.
//
// k must grant the whole allocation (see mapKey): the owner maps nothing
// for a narrower grant.
func (p *Path) importKey(ctx context.Context, deadline time.Time, k wire.RemoteKey) (*ipc.Handle[*imported], error) {
	if k.GrantOffset != 0 || k.GrantLen != k.Length {
		return nil, gxerr.New(gxerr.NotSupported, "a key granting part of an allocation cannot map it (bind or put with the key it was sliced from)", nil)
	}
	key := ipc.Key{Peer: p.pid, AllocID: k.AllocID, Generation: k.Generation}
	h := p.t.imports.TryGet(key) // a hit costs no context or timer
	var err error
	if h == nil {
		h, err = p.importSlow(ctx, deadline, key, k)
	}
	if err != nil {
		return nil, err
	}
	if why := importMismatch(h, k); why != "" {
		p.t.imports.Put(h)
		return nil, gxerr.New(gxerr.Invalid, "remote key: "+why, nil)
	}
	return h, nil
}

// mappable reports whether the allocation k grants all of may be mapped
// here: one larger than the cache's MaxBytes would leave the cache over
// its bound by itself, and its size is the peer's word (a key to a sparse
// memfd of terabytes would take the address space, and a device copy
// would pin it all).
func (t *Transport) mappable(k *wire.RemoteKey) bool { return k.Length <= t.maxMap }

// importSlow is importKey on a miss: it imports, or waits for the import
// another caller runs, within the caller's ctx and deadline.
func (p *Path) importSlow(ctx context.Context, deadline time.Time, key ipc.Key, k wire.RemoteKey) (*ipc.Handle[*imported], error) {
	if !p.t.mappable(&k) { // (a hit is an allocation that was mappable: importMismatch checks k against it)
		return nil, gxerr.New(gxerr.NotSupported, fmt.Sprintf("the peer's allocation of %d bytes is larger than the IPC cache's MaxBytes (%d): it is not mapped", k.Length, p.t.maxMap), nil)
	}
	cctx, cancel := datapath.WithDeadline(ctx, deadline) // the caller's bound
	defer cancel()
	for {
		h, err := p.t.imports.GetCtx(cctx, key, func(ipc.Key) (*imported, uint64, error) {
			return p.runImport(cctx, k)
		})
		// An import another caller ran failed because that caller's ctx
		// ended: this caller imports on its own.
		var ce *callerEnded
		if err == nil || !errors.As(err, &ce) || cctx.Err() != nil {
			return h, err
		}
	}
}

// callerEnded is the failure of an import whose caller's ctx ended: the
// callers that waited for it do not share it.
type callerEnded struct{ err error }

func (e *callerEnded) Error() string { return e.err.Error() }
func (e *callerEnded) Unwrap() error { return e.err }

// runImport asks the peer for the allocation k grants all of and maps
// it; cctx is the caller's ctx (importTimeout bounds it further).
func (p *Path) runImport(cctx context.Context, k wire.RemoteKey) (*imported, uint64, error) {
	ctx, cancel := context.WithTimeout(cctx, importTimeout)
	defer cancel()
	id := p.c.NewID()
	full := k
	full.Offset, full.Len = 0, k.Length
	f, err := p.c.RoundTrip(ctx, id, &wire.ImportRequest{RequestID: id, Key: full})
	if err != nil {
		if cerr := cctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return nil, 0, &callerEnded{err}
		}
		return nil, 0, err
	}
	defer f.CloseFDs()
	m, err := f.Message()
	if err != nil {
		return nil, 0, p.c.PeerErr("import reply", err)
	}
	switch m := m.(type) {
	case *wire.Error:
		return nil, 0, p.c.Refusal("import refused", m)
	case *wire.ImportReply:
		if len(f.FDs) != 2 || m.Kind != wire.FDMemfd || m.Size != k.Length || m.AllocID != k.AllocID ||
			m.Generation != k.Generation || m.FileOffset != 0 {
			return nil, 0, p.c.PeerErr("import reply does not match the request", nil)
		}
		if h := p.t.hooks.Imported; h != nil {
			h()
		}
		im, n, err := p.t.mapImport(f.FDs[0], f.FDs[1], m.Size)
		if err == nil {
			im.mac = k.MAC
		}
		return im, n, err
	}
	return nil, 0, p.c.PeerErr("unexpected reply to an import", nil)
}

// importMismatch says why key k may not use the import h of its
// allocation ("" when it may).
func importMismatch(h *ipc.Handle[*imported], k wire.RemoteKey) string {
	switch {
	case !hmac.Equal(h.Value().mac[:], k.MAC[:]):
		// The owner verified the key the mapping was made for; this one
		// names the same allocation with another MAC: forged or edited
		// (e.g. a narrowed key re-encoded with a wider grant).
		return "its MAC does not match the key the allocation was imported with"
	case h.Size() != k.Length:
		// The MAC is the peer's own: a key of the same allocation that
		// claims a larger Length would reach past the mapping.
		return fmt.Sprintf("length %d, the allocation was imported with %d", k.Length, h.Size())
	}
	return ""
}

// mapImport maps a peer's memfd and validity flag.
func (t *Transport) mapImport(f, valid *fd.FD, size uint64) (*imported, uint64, error) {
	v, err := ipc.MapValidity(valid)
	if err != nil {
		return nil, 0, err
	}
	m, err := ipc.MapShared(f, int(size))
	if err != nil {
		_ = v.Close()
		return nil, 0, err
	}
	unmap := func() error { return errors.Join(m.Close(), v.Close()) }
	b, err := t.env.WrapHost(m.Bytes(), unmap)
	if err != nil {
		_ = unmap()
		return nil, 0, err
	}
	return &imported{m: m, valid: v, buf: b}, size, nil
}

// importErr maps an import failure to an error kind.
func (p *Path) importErr(err error) error {
	switch {
	case errors.Is(err, gxerr.Invalid), errors.Is(err, gxerr.Peer), errors.Is(err, gxerr.Timeout),
		errors.Is(err, gxerr.Canceled), errors.Is(err, gxerr.NotSupported):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return gxerr.New(gxerr.Timeout, p.name+": import", err)
	case errors.Is(err, context.Canceled):
		return gxerr.New(gxerr.Canceled, p.name+": import", err)
	case errors.Is(err, ipc.ErrClosed):
		return gxerr.New(gxerr.Closed, "import", err)
	case errors.Is(err, ipc.ErrStale):
		if ferr := p.c.Err(); ferr != nil {
			// The endpoint ended during the import and its teardown
			// purged the entry (PurgePeer): the key is not stale, the
			// peer is gone.
			return ferr
		}
		return gxerr.New(gxerr.Invalid, p.name+": stale key", err)
	}
	return p.c.PeerErr("import", err)
}

// staleImport is the error of a copy through the mapping im whose
// allocation its owner revoked; the mapping is dropped from the cache.
// A key its owner freed is stale (ErrInvalid); an allocation that went
// with its owner's engine is the peer's leaving (ErrPeer: ownerGone).
func (p *Path) staleImport(im *imported, k *wire.RemoteKey) error {
	p.t.imports.Invalidate(p.pid, k.AllocID, k.Generation)
	if im.valid.OwnerGone() {
		return p.ownerGone(fmt.Sprintf("allocation %d", k.AllocID))
	}
	return gxerr.New(gxerr.Invalid, fmt.Sprintf("%s: stale key: allocation %d was freed by its owner", p.name, k.AllocID), nil)
}

// ownerGone is the error of a copy into or out of memory that went with
// its owner's engine (the owner revoked it closing: ipc.Validity.CloseGone):
// the endpoint's failure once it has failed, else (the owner's Bye not
// read yet) the peer's leaving all the same.
func (p *Path) ownerGone(what string) error {
	if err := p.c.Err(); err != nil {
		return err
	}
	return p.c.PeerErr(what+": the peer closed its engine", nil)
}

// Import maps the peer's allocation k grants all of (through the cache,
// as a served request does) and returns the release of the reference
// (tests).
func (p *Path) Import(ctx context.Context, k wire.RemoteKey) (release func(), err error) {
	h, err := p.importKey(ctx, time.Time{}, k)
	if err != nil {
		return nil, p.importErr(err)
	}
	return func() { p.t.imports.Put(h) }, nil
}
