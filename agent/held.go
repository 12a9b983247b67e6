package agent

// maxHeldClosed bounds the endpoints of one source that ended (their peer
// closed them) holding a notification not yet queued (it waits at the
// source's share, or for room in a full queue): such a notification is
// kept, nothing being dropped while both agents live, and so are its
// endpoint and the goroutine serving it, until it is queued. While a
// source holds maxHeldClosed of them, the hellos of its new connections
// are not answered (their dial waits, bounded by the dialer's context
// and its Config.HelloTimeout) until one is queued: a peer that opens
// connections in a loop, each sending a notification and closing, is
// held there instead of growing the agent for as long as the
// application does not Recv. A source's
// endpoints still open are bounded by the engine (MaxPeersPerSource).
// An honest sender sends nothing before its hello is answered: no
// notification of it waits behind a hello not answered.
const maxHeldClosed = 16

// gateHello waits, before in's hello is read, while in's source holds
// a.maxHeldClosed ended endpoints with a notification not queued yet.
// false: in ended meanwhile (nothing of it was taken) or the agent
// closed.
func (a *Agent) gateHello(in *inbound) bool {
	s := in.src
	for {
		s.mu.Lock()
		if s.held < a.maxHeldClosed {
			s.mu.Unlock()
			return true
		}
		if s.gate == nil {
			s.gate = make(chan struct{})
		}
		gate := s.gate
		s.mu.Unlock()
		select {
		case <-gate:
		case <-in.ep.Done():
			return false
		case <-a.ctx.Done():
			return false
		}
	}
}

// hold counts in, which ended holding a notification not queued yet,
// against its source's maxHeldClosed (once: *held).
func (a *Agent) hold(in *inbound, held *bool) {
	if *held {
		return
	}
	*held = true
	in.src.mu.Lock()
	in.src.held++
	in.src.mu.Unlock()
}

// unhold undoes hold once in's notification was queued (or the agent
// closed), waking the hellos waiting at the gate.
func (a *Agent) unhold(in *inbound, held *bool) {
	if !*held {
		return
	}
	*held = false
	s := in.src
	s.mu.Lock()
	s.held--
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}
