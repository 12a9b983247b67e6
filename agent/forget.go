package agent

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// ErrForgotten: the peer was dropped by Forget. A PeerError wrapping it
// also matches engine.ErrPeer.
var ErrForgotten = errors.New("agent: peer forgotten")

// Forget drops what this agent keeps of the named peer, for an
// application done with it: its cached record and keys, the connection
// to it (the transfers in flight on it fail with a PeerError matching
// ErrForgotten and engine.ErrPeer; as always, their local memory is the
// engine's until their Xfer is done), the address Connect reached it at
// and the watch of its record in the store. It does not wait for the
// connection to close (that runs on a goroutine of the agent, which
// Close waits for): an event loop serving other peers can call it. Peer
// then finds the name only in the store, or once it is Connected again.
// A Peer, Connect, Write, Read, Prepare or Notify that started before
// Forget and would cache the name after it (its lookup or its dial in
// flight) caches nothing: it fails with such a PeerError, the
// connection it dialed closed, whatever Forget returned; one that
// starts after Forget returned is a new lookup, and caches the peer. A
// name this agent keeps nothing of and looks nothing up (never reached,
// or forgotten already: Forget is idempotent) is an error matching
// meta.ErrNotFound; after Close, engine.ErrClosed.
func (a *Agent) Forget(name string) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return engine.ErrClosed
	}
	for op := range a.pending {
		op.forget(name)
	}
	a.forgets.add(name)
	// A Peer that starts from now on looks the name up anew, not
	// waiting for the lookup in flight (whose callers now fail).
	_, looking := a.resolving[name]
	delete(a.resolving, name)
	p := a.peers[name]
	_, hasAddr := a.addrs[name]
	if hasAddr {
		delete(a.addrs, name)
		if i := slices.Index(a.addrOrder, name); i >= 0 {
			a.addrOrder = slices.Delete(a.addrOrder, i, i+1)
		}
	}
	_, watched := a.watches[name]
	a.mu.Unlock()
	if p == nil && !hasAddr && !watched && !looking {
		return fmt.Errorf("agent %s: forget %q: %w", a.cfg.Name, name, meta.ErrNotFound)
	}
	if p != nil {
		p.invalidate(forgottenCause())
	}
	if watched {
		a.unwatchIdle(name)
	}
	return nil
}

// pending is a lookup (Peer) or a Connect in progress: the names
// forgotten meanwhile, which it must not cache (a.mu guards it).
type pending struct {
	forgot map[string]struct{}
}

func (op *pending) forget(name string) {
	if op.forgot == nil {
		op.forgot = map[string]struct{}{}
	}
	op.forgot[name] = struct{}{}
}

// forgotten reports whether the name was forgotten since op began (a.mu
// held).
func (op *pending) forgotten(name string) bool {
	_, ok := op.forgot[name]
	return ok
}

// begin registers a lookup or Connect in progress; end (deferred) ends it.
func (a *Agent) begin() *pending {
	op := &pending{}
	a.mu.Lock()
	a.pending[op] = true
	a.mu.Unlock()
	return op
}

func (a *Agent) end(op *pending) {
	a.mu.Lock()
	delete(a.pending, op)
	a.mu.Unlock()
}

// errForgotten is the failure of a lookup or Connect of a peer forgotten
// meanwhile (as the peer's own, had it been cached).
func errForgotten(name string, inc uint64) error {
	return &PeerError{Name: name, Incarnation: inc, Err: forgottenCause()}
}

func forgottenCause() error { return fmt.Errorf("%w: %w", engine.ErrPeer, ErrForgotten) }

// forgetLog counts the Forgets (a.mu guards it) and keeps the names of
// the last ones, for a Write, Read or Notify whose peer proved stale when
// dialed: its retry must not look up a name forgotten since it found
// that peer (it would cache it again). Read by the lookup the retry
// starts, not per transfer.
type forgetLog struct {
	seq  uint64                   // Forgets so far
	last [forgetLogLen]forgotName // the last ones, at seq % forgetLogLen
}

const forgetLogLen = 16

type forgotName struct {
	name string
	seq  uint64
}

func (f *forgetLog) add(name string) {
	f.seq++
	f.last[f.seq%forgetLogLen] = forgotName{name, f.seq}
}

// since reports whether name was forgotten after the first seq Forgets;
// after more than forgetLogLen Forgets since, conservatively, yes.
func (f *forgetLog) since(name string, seq uint64) bool {
	if f.seq-seq > forgetLogLen {
		return true
	}
	for _, e := range f.last {
		if e.seq > seq && e.name == name {
			return true
		}
	}
	return false
}
