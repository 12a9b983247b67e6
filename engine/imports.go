package engine

import (
	"context"
	"errors"
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
	m   *ipc.Mapping
	buf *Buffer
}

// serveImport hands a peer the memfd of one of our host buffers.
func (ep *Endpoint) serveImport(m *wire.ImportRequest) {
	// The memfd is handed over read-write: only a read-write key imports.
	s, st, msg := ep.e.lookupKey(&m.Key, 0, m.Key.Len, wire.KeyRead|wire.KeyWrite)
	if st == wire.StatusOK && s.buf.shm == nil {
		st, msg = wire.StatusNotSupported, "not shareable host memory"
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
	b.addImporter(ep)
	rep := &wire.ImportReply{RequestID: m.RequestID, AllocID: b.id, Generation: ep.e.ident.epoch,
		Kind: wire.FDMemfd, Size: b.size}
	if err := ep.c.Send(rep, b.shm.FD()); err != nil {
		ep.e.log.Debug().Err(err).Msg("import reply not sent")
	}
}

// importKey maps a peer's shared host buffer through the IPC handle cache.
//
// ctx and deadline bound an import (a round trip to the peer); a cache hit
// costs no context or timer.
func (ep *Endpoint) importKey(ctx context.Context, deadline time.Time, k wire.RemoteKey) (*ipc.Handle[*imported], error) {
	key := ipc.Key{Peer: ep.pid, AllocID: k.AllocID, Generation: k.Generation}
	return ep.e.imports.Get(key, func(ipc.Key) (*imported, uint64, error) {
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
			if len(f.FDs) != 1 || m.Kind != wire.FDMemfd || m.Size != k.Length || m.AllocID != k.AllocID ||
				m.Generation != k.Generation || m.FileOffset != 0 {
				return nil, 0, ep.peerErr("import reply does not match the request", nil)
			}
			return ep.e.mapImport(f.FDs[0], m.Size)
		}
		return nil, 0, ep.peerErr("unexpected reply to an import", nil)
	})
}

func (e *Engine) mapImport(f *fd.FD, size uint64) (*imported, uint64, error) {
	m, err := ipc.MapShared(f, int(size))
	if err != nil {
		return nil, 0, err
	}
	mem := m.Bytes()
	b := &Buffer{eng: e, id: e.nextID.Add(1), loc: Host, size: size, user: mem, ptr: unsafe.Pointer(&mem[0]), onDestroy: m.Close}
	if err := e.types.Insert(b.Addr(), size, memcache.MemHost, -1, b); err != nil {
		_ = m.Close()
		return nil, 0, err
	}
	e.track(b)
	return &imported{m: m, buf: b}, size, nil
}

// broadcastInvalidate tells the peers that imported an exported buffer
// that it is gone. It never blocks its caller (which may be a completion
// actor): the sends run on their own goroutine, bounded by the write
// timeout.
func (e *Engine) broadcastInvalidate(b *Buffer) {
	b.impMu.Lock()
	eps := b.importers
	b.importers = nil
	b.impMu.Unlock()
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

// addImporter records a peer that mapped the buffer, to be told when it is
// freed.
func (b *Buffer) addImporter(ep *Endpoint) {
	b.impMu.Lock()
	if b.importers == nil {
		b.importers = map[*Endpoint]struct{}{}
	}
	b.importers[ep] = struct{}{}
	b.impMu.Unlock()
}

// refusal maps an owner's refusal to an error kind.
func (ep *Endpoint) refusal(what string, m *wire.Error) error {
	switch m.Code {
	case wire.StatusOutOfRange, wire.StatusBadKey, wire.StatusAccess, wire.StatusStale:
		return newErr(ErrInvalid, ep.name+": "+what, m)
	}
	return ep.peerErr(what, m)
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
		return newErr(ErrInvalid, ep.name+": stale key", err)
	}
	return ep.peerErr("import", err)
}
