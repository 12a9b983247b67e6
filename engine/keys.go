package engine

import "github.com/gxfer/gxfer/wire"

// The owner's side of remote keys: every check of a key a peer presents
// (through any data path: datapath.Env.Lookup) is here.

// lookupKey checks a key a peer presented and returns the slice it names
// (off, n within the key's view). Every check the owner makes is here.
func (e *Engine) lookupKey(k *wire.RemoteKey, off, n uint64, need wire.KeyFlags) (Slice, wire.Status, string) {
	if k.Owner != e.ident.hello.EngineID {
		return Slice{}, wire.StatusBadKey, "key belongs to another engine"
	}
	if err := e.verifyKey(k); err != nil {
		return Slice{}, wire.StatusBadKey, "key signature does not verify"
	}
	if !k.Allows(need) {
		return Slice{}, wire.StatusAccess, "key does not grant this access"
	}
	start, err := k.Span(off, n)
	if err != nil {
		return Slice{}, wire.StatusOutOfRange, err.Error()
	}
	e.mu.Lock()
	b := e.buffers[k.AllocID]
	e.mu.Unlock()
	if b == nil || k.Generation != e.ident.epoch || b.state.Load()&freedBit != 0 || b.size != k.Length || !b.exported.Load() {
		return Slice{}, wire.StatusStale, "buffer no longer exported"
	}
	return b.Slice(int(start), int(n)), wire.StatusOK, ""
}

// verifyKey checks k's signature. The last key that verified is kept: a
// peer repeating it (a loop of small transfers to one buffer) presents
// the same signed bytes, and equal bytes need no second MAC.
func (e *Engine) verifyKey(k *wire.RemoteKey) error {
	signed := *k                     // on the stack: only a key verified anew is kept
	signed.Offset, signed.Len = 0, 0 // the view is not signed
	if last := e.lastVerified.Load(); last != nil && *last == signed {
		return nil
	}
	if err := e.ident.signer.Verify(k); err != nil {
		return err
	}
	kept := signed
	e.lastVerified.Store(&kept)
	return nil
}
