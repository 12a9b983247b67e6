package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// Binding prepares repeated transfers between one local host slice and one
// slice of a peer's host buffer: the arguments are checked, the peer's
// memory imported and both buffers referenced once, so each Put or Get is
// only a copy into or out of the peer's mapped memory (the shape of a UCT
// endpoint with an unpacked remote key). Use it for small messages in a
// loop; Endpoint.Put/Get are the general, asynchronous operations.
type Binding struct {
	ep           *Endpoint
	mine, theirs []byte
	lbuf, rbuf   *Buffer
	h            *ipc.Handle[*imported]

	mu     sync.RWMutex // Put/Get hold it shared; Close exclusively
	closed bool
	ops    atomic.Uint64 // added to the engine's Stats at Close (one atomic per op here)
}

// Bind prepares transfers between local and remote (same length, host
// memory on both sides).
func (ep *Endpoint) Bind(ctx context.Context, local Slice, remote RemoteKey) (*Binding, error) {
	e := ep.e
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := ep.Err(); err != nil {
		return nil, err
	}
	if err := e.validateSlice(local); err != nil {
		return nil, err
	}
	if remote.err != nil {
		return nil, remote.err
	}
	if err := remote.k.Check(0, remote.k.Len); err != nil {
		return nil, newErr(ErrInvalid, "remote key view", err)
	}
	if ep.kind != TransportIPC {
		return nil, newErr(ErrNotSupported, "bindings need memory shared on one node (a \"unix\" endpoint); this one is "+ep.kind.String(), nil)
	}
	if local.buf.loc.gaudi || remote.k.MemType != wire.MemHost {
		return nil, newErr(ErrNotSupported, "bindings are between host buffers (use Put/Get for Gaudi memory)", nil)
	}
	if remote.k.Len != local.n {
		return nil, newErr(ErrInvalid, fmt.Sprintf("length mismatch: local %d, remote %d", local.n, remote.k.Len), nil)
	}
	if remote.k.Owner != ep.peer.EngineID {
		return nil, newErr(ErrInvalid, "remote key belongs to another engine than "+ep.name, nil)
	}
	if !remote.k.Allows(wire.KeyRead | wire.KeyWrite) {
		return nil, newErr(ErrInvalid, "remote key does not grant read and write access", nil)
	}
	h, err := ep.importKey(ctx, e.opConfig(nil).deadline, remote.k)
	if err != nil {
		return nil, ep.importErr(err)
	}
	theirs := h.Value().buf.Slice(int(remote.k.Offset), int(remote.k.Len))
	if err := acquirePair(theirs, local); err != nil {
		e.imports.Put(h)
		return nil, err
	}
	return &Binding{ep: ep, mine: local.hostBytes(), theirs: theirs.hostBytes(), lbuf: local.buf, rbuf: theirs.buf, h: h}, nil
}

// check refuses a closed binding or one whose peer memory is gone (the
// exporter freed it, or the peer disconnected).
func (b *Binding) check() error {
	if b.closed {
		return newErr(ErrClosed, "binding closed", nil)
	}
	if b.h.Gone() {
		if err := b.ep.Err(); err != nil {
			return err
		}
		return newErr(ErrInvalid, b.ep.name+": the peer's buffer is no longer exported", nil)
	}
	return nil
}

// Put copies the local slice into the peer's. It returns when the data is
// in the peer's memory.
func (b *Binding) Put() error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.check(); err != nil {
		return err
	}
	copy(b.theirs, b.mine)
	b.ops.Add(1)
	return nil
}

// Get copies the peer's slice into the local one.
func (b *Binding) Get() error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.check(); err != nil {
		return err
	}
	copy(b.mine, b.theirs)
	b.ops.Add(1)
	return nil
}

// PutN runs n Puts back to back: each copies the whole local slice into
// the peer's, as n calls of Put would, but the binding is checked and its
// lock taken once for all of them, and Stats count them with one atomic
// (the loop of a bandwidth test, like UCT's put_bw posting its puts). A
// binding closed or whose peer memory goes away meanwhile is noticed at
// the next call. n <= 0 does nothing.
func (b *Binding) PutN(n int) error { return b.copyN(n, true) }

// GetN runs n Gets back to back (see PutN).
func (b *Binding) GetN(n int) error { return b.copyN(n, false) }

func (b *Binding) copyN(n int, put bool) error {
	if n <= 0 {
		return nil
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.check(); err != nil {
		return err
	}
	dst, src := b.theirs, b.mine
	if !put {
		dst, src = src, dst
	}
	for range n {
		copy(dst, src)
	}
	b.ops.Add(uint64(n))
	return nil
}

// Close releases the binding (after in-progress Puts and Gets return) and
// adds its operations to the engine's Stats. Idempotent.
func (b *Binding) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if n := b.ops.Load(); n > 0 {
		st := &b.ep.e.st
		st.submitted.Add(n)
		st.completed.Add(n)
		st.inline.Add(n)
		st.bytes.Add(n * uint64(len(b.mine)))
	}
	b.lbuf.release()
	b.rbuf.release()
	b.ep.e.imports.Put(b.h)
	return nil
}
