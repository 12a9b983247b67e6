package engine

import (
	"errors"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/shm"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/wire"
)

// The data paths the engine coordinates (internal/datapath): each
// transport is a package of its own, registered here. Adding a transport
// is one registration in openTransports (and a TransportKind value).

// openTransports registers the engine's transports.
func (e *Engine) openTransports() {
	e.transports = map[TransportKind]datapath.Transport{}
	e.register(tcp.New(e.env()))
	e.register(shm.New(e.env(), shm.Config{MaxRegions: e.cfg.IPCCache.MaxRegions, MaxBytes: e.cfg.IPCCache.MaxBytes}))
	e.openRDMA() // rdma.go: registers internal/datapath/rdmapath when a NIC opens
}

// register adds a transport (and its buffer hooks).
func (e *Engine) register(t datapath.Transport) {
	e.transports[TransportKind(t.Kind())] = t
	if h, ok := t.(datapath.BufferHooks); ok {
		e.bufHooks = append(e.bufHooks, h)
	}
}

// closeTransports runs once every endpoint is closed, before the buffers
// still alive are freed.
func (e *Engine) closeTransports() error {
	var errs []error
	for _, t := range e.transports {
		errs = append(errs, t.Close())
	}
	return errors.Join(errs...)
}

// finishTransports runs last, once every buffer is gone.
func (e *Engine) finishTransports() error {
	var errs []error
	for _, t := range e.transports {
		if f, ok := t.(datapath.Finisher); ok {
			errs = append(errs, f.Finish())
		}
	}
	return errors.Join(errs...)
}

// hooksExport lets the transports add to a key being exported (rkeys).
func (e *Engine) hooksExport(b *Buffer, k *wire.RemoteKey) {
	for _, h := range e.bufHooks {
		h.Export(b.dp(), k)
	}
}

// hooksRevoke tells the transports that b is being freed (Free called;
// the memory lives until the operations in flight end).
func (e *Engine) hooksRevoke(b *Buffer) {
	for _, h := range e.bufHooks {
		h.Revoke(b.dp())
	}
}

// hooksFreeing tells the transports that b's memory goes now.
func (e *Engine) hooksFreeing(b *Buffer) error {
	var errs []error
	for _, h := range e.bufHooks {
		errs = append(errs, h.Freeing(b.dp()))
	}
	return errors.Join(errs...)
}
