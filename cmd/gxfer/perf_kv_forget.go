package main

import "github.com/gxfer/gxfer/agent"

// peerForgets has a target forget (agent.Forget) the peer of an initiator
// whose run ended (kvTarget.run): its connection, record and address are
// of no use any more, and a target whose initiators say hello under new
// names and stay (their agents live on) would keep them all for its life.
// A name is forgotten once nothing of the target uses it: not while a run
// of it is active or a hello of it is answered (that run reaches it
// again), nor while a sender of acknowledgements to an ended run of it
// still sends what was queued (the kvFailed that ended the run, say):
// that sender's end forgets it then. Only the loop of run calls its
// methods, senderEnded excepted.
type peerForgets struct {
	a       *agent.Agent
	active  map[string]bool // run's: the initiators welcomed and not ended
	hellos  *helloSlots     // run's: the hellos being answered
	sending map[string]int  // senders to ended runs still sending, by name
	sent    chan string     // a sender's queue was closed and it has ended
}

func newPeerForgets(a *agent.Agent, active map[string]bool, hellos *helloSlots) *peerForgets {
	return &peerForgets{a: a, active: active, hellos: hellos, sending: map[string]int{}, sent: make(chan string)}
}

// endSender closes the queue of name's sender of acknowledgements, if
// any (taking it out of ackers): it goes once it sent what is queued.
func (f *peerForgets) endSender(ackers map[string]chan []byte, name string) {
	if q, ok := ackers[name]; ok {
		close(q)
		delete(ackers, name)
		f.sending[name]++
	}
}

// senderEnded is the last word of a sender of acknowledgements to name,
// on its goroutine, once its queue was closed (endSender, or the
// target's exit).
func (f *peerForgets) senderEnded(name string, exiting <-chan struct{}) {
	select {
	case f.sent <- name:
	case <-exiting:
	}
}

// sentAll takes the end of a sender to name (from f.sent) and forgets
// name if nothing uses it any more.
func (f *peerForgets) sentAll(name string) {
	if f.sending[name]--; f.sending[name] <= 0 {
		delete(f.sending, name)
	}
	f.forget(name)
}

// forget forgets name's peer unless a run of it is active, a hello of it
// is answered or a sender to it still sends.
func (f *peerForgets) forget(name string) {
	if f.active[name] || f.hellos.answering[name] || f.sending[name] > 0 {
		return
	}
	_ = f.a.Forget(name) // (meta.ErrNotFound: nothing was kept of it)
}

// strayed forgets the agent a hello's address served, when that was not
// the hello's sender (helloResult.reached), unless the target uses it.
func (f *peerForgets) strayed(h helloResult) {
	if h.reached != "" && h.reached != h.from {
		f.forget(h.reached)
	}
}
