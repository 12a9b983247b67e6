package main

import "github.com/gxfer/gxfer/agent"

// peerWatches are the watches a target keeps on the peers of its active
// initiators (kvTarget.run): a goroutine each, waiting for the peer to go.
// An initiator's watch stops when it ends, or a peer saying hello under
// a new name each time (and staying) would grow them for the target's
// life.
type peerWatches map[string]peerWatch

type peerWatch struct {
	p    *agent.Peer
	stop chan struct{}
}

// start records the watch of the named initiator on p, stopping the one
// on an earlier peer of the name; false: p is watched already.
func (w peerWatches) start(name string, p *agent.Peer) (stop <-chan struct{}, ok bool) {
	if old, ok := w[name]; ok {
		if old.p == p {
			return nil, false
		}
		close(old.stop)
	}
	pw := peerWatch{p: p, stop: make(chan struct{})}
	w[name] = pw
	return pw.stop, true
}

// end stops the named initiator's watch, if any.
func (w peerWatches) end(name string) {
	if pw, ok := w[name]; ok {
		close(pw.stop)
		delete(w, name)
	}
}

// current reports whether p is the peer its name's watch is on: a watch
// stopped since (its initiator ended, maybe followed by another run of
// the name) may still report its peer gone.
func (w peerWatches) current(p *agent.Peer) bool {
	pw, ok := w[p.Name()]
	return ok && pw.p == p
}
