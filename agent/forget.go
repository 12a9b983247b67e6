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
// then finds the name only in the store, or once it is Connected again
// (a Peer, Connect or transfer running meanwhile may cache it again). A
// name this agent keeps nothing of (never reached, or forgotten already:
// Forget is idempotent) is an error matching meta.ErrNotFound; after
// Close, engine.ErrClosed.
func (a *Agent) Forget(name string) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return engine.ErrClosed
	}
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
	if p == nil && !hasAddr && !watched {
		return fmt.Errorf("agent %s: forget %q: %w", a.cfg.Name, name, meta.ErrNotFound)
	}
	if p != nil {
		p.invalidate(fmt.Errorf("%w: %w", engine.ErrPeer, ErrForgotten))
	}
	if watched {
		a.unwatchIdle(name)
	}
	return nil
}
