// Package shm is gxfer's data path between two engines on one node (a
// "unix" endpoint, engine.TransportIPC): shared host memory and fd passing
// over the endpoint's unix socket.
//
// The owner of an exported host buffer hands its memfd, with a validity
// flag, to a peer that asks (ImportRequest); the peer maps it once through
// the IPC handle cache and then copies into or out of the mapping on its
// own: a Put or Get on the owner's host memory is a memmove (or a device
// DMA for local Gaudi memory), and a Binding's Put is one copy on the
// caller's goroutine. The owner's Gaudi memory cannot be mapped: the
// requester exports a host bounce buffer of its own and asks the owner to
// perform the DMA between it and its device memory (a wire.Put or Get
// whose local side is a key).
//
// Freeing an exported buffer revokes its validity flag at once (a peer's
// copy that ends after it reports the key stale) and tells the importers
// (wire.Invalidate) once the memory goes.
//
// Cancellation: when the ctx of a Put or Get ends, what has not started is
// dropped (a copy still queued, a request to the owner not yet sent, a
// Get's copy out of the bounce buffer) and the operation resolves with
// ErrCanceled or ErrTimeout once nothing touches the caller's memory. A
// request the owner is performing touches only the bounce buffer: the
// operation resolves at once, and the bounce buffer is freed once the
// owner has answered (or the endpoint has ended).
package shm

import (
	"context"
	"sync"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// Config sizes the transport's IPC handle cache (engine.Config.IPCCache).
type Config struct {
	MaxRegions int
	MaxBytes   uint64
}

// Exporter is what this transport needs of its Env beyond datapath.Env:
// a signed key granting a peer the whole of a local host buffer (the
// bounce buffer a peer performs a request into), marking it exported.
type Exporter interface {
	ExportKey(b datapath.Buf) (wire.RemoteKey, error)
}

// Transport is the shared-memory data path of an engine: the imports of
// peers' memory (the IPC handle cache) and the validity flags of this
// engine's buffers that peers mapped.
type Transport struct {
	env datapath.Env
	log zerolog.Logger
	// imports maps peers' host memory, each allocation once per
	// connection.
	imports *ipc.HandleCache[*imported]
	// maxMap is the largest allocation of a peer mapped here (the cache's
	// MaxBytes): a larger one (the size is the peer's word) is not
	// mapped, its owner performs the operations on it.
	maxMap uint64
	// validity holds the validity flag (*ipc.Validity) of each exported
	// host buffer (datapath.Buf) a peer imported, until the buffer goes.
	validity sync.Map
	// listPool holds *listScratch: the slices of list copy jobs.
	listPool sync.Pool

	hooks Hooks
}

// Hooks are test hooks (nil: none), set before the transport is used.
type Hooks struct {
	// Served runs in a served request after its copy, before the
	// requester's validity flag is checked.
	Served func()
	// BeforeRequest runs before a request the peer performs into or out
	// of a bounce buffer is sent; Answered once the peer answered it,
	// before a Get's copy out of the bounce buffer.
	BeforeRequest, Answered func()
	// BounceFreed runs when a bounce buffer is freed, with the operation's
	// outcome as it stood then.
	BounceFreed func(err error)
	// ListCopied runs after each copy job of a list (StartList), with
	// its pieces and bytes.
	ListCopied func(pieces int, bytes uint64)
	// Imported runs when the peer's reply to an import arrived, before
	// its memory is mapped.
	Imported func()
}

var (
	_ datapath.Transport   = (*Transport)(nil)
	_ datapath.BufferHooks = (*Transport)(nil)
)

// New makes the transport of env.
func New(env datapath.Env, cfg Config) *Transport {
	t := &Transport{env: env, log: env.Logger(), maxMap: cfg.MaxBytes}
	if t.maxMap == 0 {
		t.maxMap = ipc.DefaultMaxBytes
	}
	t.imports = ipc.NewHandleCache(ipc.CacheConfig[*imported]{
		MaxRegions: cfg.MaxRegions, MaxBytes: cfg.MaxBytes, Logger: t.log,
		Release: func(im *imported) error { return env.FreeHost(im.buf) },
	})
	return t
}

// SetHooks installs test hooks (before the transport is used).
func (t *Transport) SetHooks(h Hooks) { t.hooks = h }

// Kind is datapath.KindIPC.
func (t *Transport) Kind() datapath.Kind { return datapath.KindIPC }

// Connect makes the data path of an endpoint on a unix socket.
func (t *Transport) Connect(_ context.Context, c datapath.Ctrl) (datapath.Path, error) {
	return &Path{t: t, c: c, env: t.env, pid: c.Peer(), name: c.Name()}, nil
}

// Close releases the imports (once every endpoint is closed) and the
// validity flags still held: the engine is closing, so a peer's copy into
// a buffer not freed before reports the peer gone (CloseGone), not a
// stale key.
func (t *Transport) Close() error {
	err := t.imports.Close()
	t.validity.Range(func(b, v any) bool {
		t.validity.Delete(b)
		if cerr := v.(*ipc.Validity).CloseGone(); cerr != nil {
			t.log.Warn().Err(cerr).Msg("validity flag not released")
		}
		return true
	})
	return err
}

// CacheStats are the IPC handle cache's counters.
func (t *Transport) CacheStats() ipc.CacheStats { return t.imports.Stats() }

// Invalidate drops the import of a peer's allocation, as the peer's
// wire.Invalidate does (benchmarks).
func (t *Transport) Invalidate(peer ipc.PeerID, allocID, gen uint64) {
	t.imports.Invalidate(peer, allocID, gen)
}

// Export adds nothing to a key: a peer maps the memory through the
// endpoint (ImportRequest).
func (t *Transport) Export(datapath.Buf, *wire.RemoteKey) {}

// Revoke sets the validity flag of b, if a peer imported it: the peers'
// copies into or out of their mappings fail as stale from now on (Free
// calls it; the memory lives until the operations in flight end).
//
// It needs no lock against lend: Free marks b freed before it calls
// Revoke, and lend stores the flag before it checks whether b is freed,
// so either Revoke finds the flag or lend finds b freed.
func (t *Transport) Revoke(b datapath.Buf) {
	if v, ok := t.validity.Load(b); ok {
		v.(*ipc.Validity).Revoke()
	}
}

// Freeing tells the peers that imported b that it is gone. It never
// blocks its caller (which may be a completion actor), and a peer that
// does not read never holds up the others: each Invalidate goes to its
// endpoint's writer (QueueReply; a full queue fails that endpoint).
//
// b's validity flag, revoked by Free already (Revoke), is released first:
// a peer whose copy into or out of its mapping ends after the revocation
// reports the key stale (the Invalidate below may arrive later than the
// peer's next Put).
func (t *Transport) Freeing(b datapath.Buf) error {
	if v, ok := t.validity.LoadAndDelete(b); ok {
		if err := v.(*ipc.Validity).Close(); err != nil {
			t.log.Warn().Err(err).Msg("validity flag not released")
		}
	}
	st := b.State()
	st.Mu.Lock()
	ls, _ := st.IPC.(*lent)
	st.IPC = nil
	st.Mu.Unlock()
	if ls == nil {
		return nil
	}
	for p := range ls.importers {
		p.mu.Lock()
		delete(p.lent, b)
		p.mu.Unlock()
		if p.c.Err() != nil {
			continue
		}
		if err := p.c.QueueReply(&wire.Invalidate{AllocID: b.ID(), Generation: ls.gen}); err != nil {
			p.c.Fail(p.c.PeerErr("invalidate", err))
		}
	}
	return nil
}

// Importers counts the endpoints recorded as mapping b (tests).
func Importers(b datapath.Buf) int {
	st := b.State()
	st.Mu.Lock()
	defer st.Mu.Unlock()
	if ls, ok := st.IPC.(*lent); ok {
		return len(ls.importers)
	}
	return 0
}
