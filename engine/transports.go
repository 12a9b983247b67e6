package engine

import (
	"github.com/gxfer/gxfer/internal/datapath/shm"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/wire"
)

// The data paths the engine coordinates (internal/datapath): each
// transport is a package of its own, registered here (e.transports, a
// datapath.Set, which also tells them of buffers' exports and frees).
// Adding a transport is one registration in openTransports (and a
// TransportKind value).

// openTransports registers the engine's transports.
func (e *Engine) openTransports() {
	e.transports.Register(tcp.New(e.env()))
	e.transports.Register(shm.New(e.env(), shm.Config{MaxRegions: e.cfg.IPCCache.MaxRegions, MaxBytes: e.cfg.IPCCache.MaxBytes}))
	e.openRDMA() // rdma.go: registers internal/datapath/rdmapath when a NIC opens
}

// hooksExport lets the transports add to a key being exported (rkeys).
func (e *Engine) hooksExport(b *Buffer, k *wire.RemoteKey) { e.transports.Export(b.dp(), k) }

// hooksRevoke tells the transports that b is being freed (Free called;
// the memory lives until the operations in flight end).
func (e *Engine) hooksRevoke(b *Buffer) { e.transports.Revoke(b.dp()) }

// hooksFreeing tells the transports that b's memory goes now.
func (e *Engine) hooksFreeing(b *Buffer) error { return e.transports.Freeing(b.dp()) }
