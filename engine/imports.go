package engine

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/memcache"
	"github.com/gxfer/gxfer/wire"
)

// Importing a peer's host memory over a unix socket (the IPC data path):
// the owner hands the memfd of an exported buffer to the peer that asks
// (serveImport), the peer maps it once through the IPC handle cache
// (importKey) and then copies into or out of it directly.

// imported is a peer's host buffer mapped into this process, wrapped in an
// internal Buffer so that device DMA can reach it.
type imported struct {
	m     *ipc.Mapping
	valid *ipc.ValidityView // the owner's flag: set once it frees the allocation
	buf   *Buffer
	// mac is the MAC of the whole-allocation key the owner accepted for
	// this import: a later key reuses the mapping only if it carries the
	// same MAC (an edited key must not ride on an earlier import).
	mac [wire.MACSize]byte
}

// revoked reports whether the owner freed the allocation.
func (im *imported) revoked() bool { return im.valid.Revoked() }

// serveImport hands a peer the memfd of one of our host buffers.
func (ep *Endpoint) serveImport(m *wire.ImportRequest) {
	// The memfd is handed over read-write: only a read-write key imports.
	s, st, msg := ep.e.lookupKey(&m.Key, 0, m.Key.Len, wire.KeyRead|wire.KeyWrite)
	if st == wire.StatusOK && s.buf.shm == nil {
		st, msg = wire.StatusNotSupported, "not shareable host memory"
	}
	if st == wire.StatusOK && (m.Key.GrantOffset != 0 || m.Key.GrantLen != m.Key.Length) {
		// A mapping reaches the whole allocation: only a key granting all
		// of it imports.
		st, msg = wire.StatusAccess, "the key grants part of the allocation only"
	}
	if st != wire.StatusOK {
		_ = ep.c.Send(wire.NewError(m.RequestID, st, msg))
		return
	}
	b := s.buf
	if err := b.acquire(); err != nil { // keep the memfd open while it is sent
		_ = ep.c.Send(wire.NewError(m.RequestID, wire.StatusStale, "buffer no longer exported"))
		return
	}
	defer b.release()
	v, err := ep.lend(b)
	if err != nil {
		_ = ep.c.Send(wire.NewError(m.RequestID, wire.StatusNoResources, err.Error()))
		return
	}
	rep := &wire.ImportReply{RequestID: m.RequestID, AllocID: b.id, Generation: ep.e.ident.epoch,
		Kind: wire.FDMemfd, Size: b.size}
	if err := ep.c.Send(rep, b.shm.FD(), v.FD()); err != nil {
		ep.e.log.Debug().Err(err).Msg("import reply not sent")
	}
}

// importKey maps a peer's shared host buffer through the IPC handle cache.
//
// ctx and deadline bound an import (a round trip to the peer); a cache hit
// costs no context or timer.
//
// k must grant the whole allocation (RemoteKey.mapKey): the owner maps
// nothing for a narrower grant.
func (ep *Endpoint) importKey(ctx context.Context, deadline time.Time, k wire.RemoteKey) (*ipc.Handle[*imported], error) {
	if k.GrantOffset != 0 || k.GrantLen != k.Length {
		return nil, newErr(ErrNotSupported, "a key granting part of an allocation cannot map it (bind or put with the key it was sliced from)", nil)
	}
	key := ipc.Key{Peer: ep.pid, AllocID: k.AllocID, Generation: k.Generation}
	h, err := ep.e.imports.Get(key, func(ipc.Key) (*imported, uint64, error) {
		ctx, cancel := context.WithTimeout(ctx, importTimeout)
		defer cancel()
		ctx, cancel2 := withDeadline(ctx, deadline)
		defer cancel2()
		id := ep.newID()
		full := k
		full.Offset, full.Len = 0, k.Length
		f, err := ep.roundTrip(ctx, id, &wire.ImportRequest{RequestID: id, Key: full})
		if err != nil {
			return nil, 0, err
		}
		defer f.CloseFDs()
		m, err := f.Message()
		if err != nil {
			return nil, 0, ep.peerErr("import reply", err)
		}
		switch m := m.(type) {
		case *wire.Error:
			return nil, 0, ep.refusal("import refused", m)
		case *wire.ImportReply:
			if len(f.FDs) != 2 || m.Kind != wire.FDMemfd || m.Size != k.Length || m.AllocID != k.AllocID ||
				m.Generation != k.Generation || m.FileOffset != 0 {
				return nil, 0, ep.peerErr("import reply does not match the request", nil)
			}
			im, n, err := ep.e.mapImport(f.FDs[0], f.FDs[1], m.Size)
			if err == nil {
				im.mac = k.MAC
			}
			return im, n, err
		}
		return nil, 0, ep.peerErr("unexpected reply to an import", nil)
	})
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(h.Value().mac[:], k.MAC[:]) {
		// The owner verified the key the mapping was made for; this one
		// names the same allocation with another MAC: forged or edited
		// (e.g. a narrowed key re-encoded with a wider grant).
		ep.e.imports.Put(h)
		return nil, newErr(ErrInvalid, "remote key: its MAC does not match the key the allocation was imported with", nil)
	}
	return h, nil
}

func (e *Engine) mapImport(f, valid *fd.FD, size uint64) (*imported, uint64, error) {
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
	mem := m.Bytes()
	b := &Buffer{eng: e, id: e.nextID.Add(1), loc: Host, size: size, user: mem, ptr: unsafe.Pointer(&mem[0]), onDestroy: unmap}
	if err := e.types.Insert(b.Addr(), size, memcache.MemHost, -1, b); err != nil {
		_ = unmap()
		return nil, 0, err
	}
	e.track(b)
	return &imported{m: m, valid: v, buf: b}, size, nil
}

// broadcastInvalidate tells the peers that imported an exported buffer
// that it is gone. It never blocks its caller (which may be a completion
// actor): the sends run on their own goroutine, bounded by the write
// timeout.
//
// It first revokes the buffer's validity flag: a peer whose copy into or
// out of its mapping ends after this reports the key stale (the
// Invalidate below may arrive later than the peer's next Put).
func (e *Engine) broadcastInvalidate(b *Buffer) {
	if v, ok := e.ident.validity.LoadAndDelete(b); ok {
		if err := v.(*ipc.Validity).Close(); err != nil {
			e.log.Warn().Err(err).Msg("validity flag not released")
		}
	}
	b.impMu.Lock()
	eps := b.importers
	b.importers = nil
	b.impMu.Unlock()
	for ep := range eps {
		ep.mu.Lock()
		delete(ep.lent, b)
		ep.mu.Unlock()
	}
	if len(eps) == 0 {
		return
	}
	msg := &wire.Invalidate{AllocID: b.id, Generation: e.ident.epoch}
	e.async.Add(1)
	go func() {
		defer e.async.Done()
		for ep := range eps {
			if ep.Err() == nil {
				_ = ep.c.Send(msg)
			}
		}
	}()
}

// revokeValidity sets the validity flag of b, if a peer imported it: the
// peers' copies into or out of their mappings fail as stale from now on
// (Free calls it; the memory lives until the operations in flight end).
func (e *Engine) revokeValidity(b *Buffer) {
	if !b.exported.Load() {
		return
	}
	b.impMu.Lock()
	defer b.impMu.Unlock()
	if v, ok := e.ident.validity.Load(b); ok {
		v.(*ipc.Validity).Revoke()
	}
}

// lend records that the endpoint's peer maps b (to be told when it is
// freed, and forgotten when the endpoint ends) and returns b's validity
// flag, made on the first import. b is acquired by the caller.
func (ep *Endpoint) lend(b *Buffer) (*ipc.Validity, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.failed != nil {
		return nil, ep.failed
	}
	b.impMu.Lock()
	defer b.impMu.Unlock()
	var v *ipc.Validity
	if x, ok := ep.e.ident.validity.Load(b); ok {
		v = x.(*ipc.Validity)
	} else {
		var err error
		if v, err = ipc.NewValidity("gxfer-valid"); err != nil {
			return nil, err
		}
		ep.e.ident.validity.Store(b, v)
	}
	if b.state.Load()&freedBit != 0 {
		v.Revoke() // Free ran while the flag was made: it found none to revoke
	}
	if b.importers == nil {
		b.importers = map[*Endpoint]struct{}{}
	}
	b.importers[ep] = struct{}{}
	if ep.lent == nil {
		ep.lent = map[*Buffer]struct{}{}
	}
	ep.lent[b] = struct{}{}
	return v, nil
}

// unlend forgets the endpoint in every buffer its peer mapped (the
// endpoint ended; called once it is marked failed, so lend adds no more).
func (ep *Endpoint) unlend() {
	ep.mu.Lock()
	lent := ep.lent
	ep.lent = nil
	ep.mu.Unlock()
	for b := range lent {
		b.impMu.Lock()
		delete(b.importers, ep)
		b.impMu.Unlock()
	}
}

// importers counts the endpoints recorded as mapping b (tests).
func (b *Buffer) importerCount() int {
	b.impMu.Lock()
	defer b.impMu.Unlock()
	return len(b.importers)
}

// importErr maps an import failure to an error kind.
func (ep *Endpoint) importErr(err error) error {
	switch {
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrPeer), errors.Is(err, ErrTimeout):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return newErr(ErrTimeout, ep.name+": import", err)
	case errors.Is(err, ipc.ErrClosed):
		return newErr(ErrClosed, "import", err)
	case errors.Is(err, ipc.ErrStale):
		if ferr := ep.Err(); ferr != nil {
			// The endpoint ended during the import and its teardown
			// purged the entry (PurgePeer): the key is not stale, the
			// peer is gone.
			return ferr
		}
		return newErr(ErrInvalid, ep.name+": stale key", err)
	}
	return ep.peerErr("import", err)
}

// rmaMapped runs a Put or Get on the peer's host memory mapped here (h,
// held by the caller and released here): a copy between local and the
// mapping. The owner's validity flag is read before the copy (a key freed
// already is refused without copying) and after it: an allocation freed
// before or during the copy makes the operation fail as stale, because
// the bytes may have gone to (or come from) memory the allocation no
// longer owns.
func (ep *Endpoint) rmaMapped(ctx context.Context, put bool, local Slice, k wire.RemoteKey, h *ipc.Handle[*imported], opts []OpOption) *Future {
	e := ep.e
	im := h.Value()
	if im.revoked() {
		e.imports.Put(h)
		return resolved(ep.staleImport(k))
	}
	theirs := im.buf.Slice(int(k.Offset), int(k.Len))
	var f *Future
	if put {
		f = e.Copy(ctx, theirs, local, opts...)
	} else {
		f = e.Copy(ctx, local, theirs, opts...)
	}
	if f.IsDone() {
		stale := im.revoked()
		e.imports.Put(h)
		if stale && f.Err() == nil {
			return resolved(ep.staleImport(k))
		}
		return f
	}
	out := newFuture(1)
	out.setSpin(e.cfg.WaitSpin)
	e.async.Add(1)
	go func() {
		defer e.async.Done()
		<-f.Done()
		err := f.Err()
		if err == nil && im.revoked() {
			err = ep.staleImport(k)
		}
		e.imports.Put(h)
		out.complete(0, err)
	}()
	return out
}

// staleImport is the error of a copy through a mapping whose allocation
// its owner freed; the mapping is dropped from the cache.
func (ep *Endpoint) staleImport(k wire.RemoteKey) error {
	ep.e.imports.Invalidate(ep.pid, k.AllocID, k.Generation)
	return newErr(ErrInvalid, fmt.Sprintf("%s: stale key: allocation %d was freed by its owner", ep.name, k.AllocID), nil)
}

// checkAfter is a unix Binding's check after its copy: the owner freed the
// peer's buffer before or during it (its validity flag is set), so the
// bytes may not have reached the allocation the key names.
func (b *Binding) checkAfter() error {
	if b.h.Value().revoked() {
		return newErr(ErrInvalid, b.ep.name+": the peer's buffer was freed by its owner", nil)
	}
	return nil
}
