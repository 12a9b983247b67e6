package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/engine"
)

// inbound is an endpoint a peer opened to this agent: the peer's hello and
// metadata requests, its notifications, and the peer's Puts and Gets (the
// engine serves those).
type inbound struct {
	ep *engine.Endpoint
	// take is held while a message is taken from ep and handled (a
	// notification queued, or handed to a Recv): by serve, or by a Recv
	// that polls the endpoint itself (pollInbound). The peer's messages
	// are handled one at a time, in order.
	take sync.Mutex
	name string // the peer's, after its hello (written under take)
	inc  uint64
	// done (under take): the peer is done with (refused, or serve ended):
	// nothing more of its messages is taken.
	done bool
	// queued counts its notifications in the agent's queue (raised under
	// take, before the notification goes in; lowered by took): a Recv
	// takes from the endpoint itself only when none is (pollInbound).
	queued atomic.Int64
	// src is the peer's source, whose share of the queue in's
	// notifications count against (waitShare).
	src *source
}

// source is where senders connect from (engine.Endpoint.Source: a unix
// peer's pid, a TCP peer's IP address or IPv6 /64), which a peer cannot
// choose as it chooses its name or engine id, or multiply by opening
// more connections: the notification queue is shared among sources.
type source struct {
	key string
	// conns counts its inbound endpoints (raised under Agent.mu); the
	// source is forgotten once it has none and no notification queued.
	conns atomic.Int64
	mu    sync.Mutex
	// queued counts its notifications in the agent's queue; waiting, the
	// serve goroutines waiting at its share, woken by closing room (then
	// made again) when one of its notifications is taken.
	queued  int64
	waiting int
	room    chan struct{}
	// held counts its endpoints that ended holding a notification not
	// queued yet (see gateHello); gate, made by the hellos waiting for it
	// to drop, is closed (then made again) when it drops.
	held int
	gate chan struct{}
}

// waitShare waits (in.take held) while in's source holds its share of
// the notification queue: NotifyQueue divided among the sources with
// notifications queued plus one (room kept for a source that has none),
// at least 1; then it counts in's notification in the queue, before it
// goes in. A source that floods an agent that does not Recv, over any
// number of connections, is held (its endpoints are not read, so the
// engine's flow control holds them) at its share, not at the whole
// queue: the others' notifications still go in, behind its share only.
// Nothing is dropped. false: the agent closed.
func (a *Agent) waitShare(in *inbound, held *bool) bool {
	s := in.src
	for {
		s.mu.Lock()
		senders := a.senders.Load()
		if s.queued == 0 {
			senders++ // s, once the notification goes in
		}
		if s.queued < max(1, int64(cap(a.notifyQ))/(senders+1)) {
			if s.queued++; s.queued == 1 {
				a.senders.Add(1)
			}
			s.mu.Unlock()
			in.queued.Add(1)
			return true
		}
		if s.room == nil {
			s.room = make(chan struct{})
		}
		room := s.room
		s.waiting++
		s.mu.Unlock()
		var ended <-chan struct{}
		if !*held {
			ended = in.ep.Done()
		}
		select {
		case <-room:
		case <-ended:
			a.hold(in, held)
		case <-a.ctx.Done():
		}
		s.mu.Lock()
		s.waiting--
		s.mu.Unlock()
		if a.ctx.Err() != nil {
			return false
		}
	}
}

// took counts a notification of in's out of the queue (taken, or not
// queued after all), waking those waiting at its source's share.
func (a *Agent) took(in *inbound) {
	in.queued.Add(-1)
	s := in.src
	s.mu.Lock()
	s.queued--
	empty := s.queued == 0
	if empty {
		a.senders.Add(-1)
	}
	if s.waiting > 0 && s.room != nil { // (nil: closed, its waiters not awake yet)
		close(s.room)
		s.room = nil
	}
	s.mu.Unlock()
	if empty && s.conns.Load() == 0 {
		a.dropSource(s)
	}
}

// sourceOfLocked is ep's source, counting ep as one of its endpoints (a.mu
// held).
func (a *Agent) sourceOfLocked(ep *engine.Endpoint) *source {
	key := ep.Source()
	s := a.sources[key]
	if s == nil {
		s = &source{key: key}
		a.sources[key] = s
	}
	s.conns.Add(1)
	return s
}

// dropSource forgets s if it has no endpoint left and nothing queued
// (one of its endpoints ended, or its last notification was taken:
// whichever comes last forgets it).
func (a *Agent) dropSource(s *source) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.mu.Lock()
	idle := s.queued == 0
	s.mu.Unlock()
	if idle && s.conns.Load() == 0 && a.sources[s.key] == s {
		delete(a.sources, s.key)
	}
}

// errUnreached: the peer could not be reached (nothing was sent).
var errUnreached = errors.New("agent: peer not reached")

// Notification is a message a peer sent (Notify, or WithNotify after the
// data of a transfer).
type Notification struct {
	From        string // the sender's name
	Incarnation uint64 // and incarnation
	Msg         []byte

	in *inbound // the endpoint it came on
}

// Source is where the notification's sender connects from, as this
// agent's socket says (engine.Endpoint.Source): a TCP peer's IP address
// (an IPv6 peer's /64), "pid N" for a unix socket peer. Unlike From, the
// sender cannot choose it: one host sending under many names has one.
func (n Notification) Source() string {
	if n.in == nil {
		return ""
	}
	return n.in.ep.Source()
}

// serve runs the agent protocol on an accepted endpoint until it ends.
func (a *Agent) serve(in *inbound) {
	defer a.wg.Done()
	defer func() {
		in.take.Lock()
		in.done = true // (a Recv polling the endpoint takes no more)
		in.take.Unlock()
		in.ep.Close()
		a.mu.Lock()
		delete(a.inbound, in)
		a.listInboundLocked()
		a.mu.Unlock()
		if in.src.conns.Add(-1) == 0 {
			a.dropSource(in.src)
		}
		a.stats.inbound.Add(-1)
	}()
	for {
		if in.name == "" && !a.gateHello(in) { // (name: written by this goroutine only)
			return
		}
		if err := in.ep.WaitRecv(a.ctx); err != nil {
			return
		}
		in.take.Lock()
		if in.done {
			in.take.Unlock()
			return
		}
		b, ok, err := in.ep.TryRecv()
		stop := err != nil
		var refuse error
		if ok {
			_, _, stop, refuse = a.handle(in, b, false)
		}
		in.done = stop
		in.take.Unlock()
		if refuse != nil {
			a.refuse(in, refuse)
		}
		if stop {
			return
		}
	}
}

// handle acts on message b of in's peer (in.take held). A notification
// goes into the agent's queue, or, direct, comes back (got) for the
// caller to return. stop: the endpoint is done with (a refusal either
// way, a malformed message, the agent closing); refuse: why the peer is
// to be told it is refused, if it is (the caller sends it: serve at
// once, a Recv from a goroutine of its own, as it may wait for the peer).
func (a *Agent) handle(in *inbound, b []byte, direct bool) (n Notification, got, stop bool, refuse error) {
	m, err := decode(b)
	if err != nil {
		return n, false, true, err
	}
	switch {
	case m.typ == msgHello && in.name == "":
		if m.expect != 0 && m.expect != a.inc {
			return n, false, true, fmt.Errorf("%w: this is incarnation %016x of %s, not %016x", engine.ErrPeer, a.inc, a.cfg.Name, m.expect)
		}
		in.name, in.inc = m.name, m.incarnation
		if err := a.hello(in, m.wantMeta); err != nil {
			a.log.Debug().Err(err).Str("peer", in.name).Msg("hello failed")
			return n, false, true, nil
		}
	case m.typ == msgNotify && in.name != "":
		n = Notification{From: in.name, Incarnation: in.inc, Msg: m.data, in: in}
		if direct {
			a.stats.notifyRecv.Add(1)
			return n, true, false, nil
		}
		// Counted (waitShare) before it is queued: a Recv may return it
		// at once, and Stats must not then count fewer than Recv returned.
		held := false // in ended while its notification waits (gateHello)
		defer a.unhold(in, &held)
		if !a.waitShare(in, &held) {
			return n, false, true, nil
		}
		a.stats.notifyRecv.Add(1)
		var ended <-chan struct{}
		if !held {
			ended = in.ep.Done()
		}
		for queued := false; !queued; {
			select {
			case a.notifyQ <- n:
				queued = true
			case <-ended:
				a.hold(in, &held)
				ended = nil
			case <-a.ctx.Done():
				a.took(in)
				a.stats.notifyRecv.Add(^uint64(0))
				return n, false, true, nil
			}
		}
	case m.typ == msgRefuse:
		a.log.Debug().Str("peer", in.name).Str("why", string(m.data)).Msg("peer refused")
		return n, false, true, nil
	default:
		return n, false, true, protoErr("unexpected %v from %q", m.typ, in.name)
	}
	return n, false, false, nil
}

// hello answers a peer's hello: this agent's name, incarnation and Version,
// and the record if asked.
func (a *Agent) hello(in *inbound, wantMeta bool) error {
	md := a.Metadata()
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.InvalidateWait)
	defer cancel()
	if err := sendMsg(in.ep, ctx, encodeHello(a.cfg.Name, a.inc, 0, md.Version, false)); err != nil {
		return err
	}
	if !wantMeta {
		return nil
	}
	rec, err := md.Encode()
	if err != nil {
		return err
	}
	for _, c := range encodeMeta(rec) {
		if err := sendMsg(in.ep, ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// refuse tells the peer why this agent ends the connection.
func (a *Agent) refuse(in *inbound, why error) {
	a.log.Debug().Err(why).Str("peer", in.name).Msg("refusing peer")
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.InvalidateWait)
	_ = sendMsg(in.ep, ctx, encodeRefuse(why.Error()))
	cancel()
}

// Recv returns the next notification a peer sent, in order per sender. It
// fails with ctx's error (engine.ErrCanceled or engine.ErrTimeout) or
// engine.ErrClosed once the agent is closed.
func (a *Agent) Recv(ctx context.Context) (Notification, error) {
	if ctx == nil {
		return Notification{}, invalid("nil context")
	}
	if n, ok := a.popQueued(); ok {
		return n, nil
	}
	// Poll for the engine's WaitSpin before parking: the queue, and the
	// peers' endpoints themselves (pollInbound). A notification that
	// arrives meanwhile is taken on this goroutine, without the hop
	// through the serving goroutine, which may share this goroutine's P
	// (they then hand it to each other through Gosched, the other P
	// idle: 1.5-2 us a notification, measured).
	if spin := a.eng.Config().WaitSpin; spin > 0 {
		until := time.Now().Add(spin)
		for i := 1; ; i++ {
			if n, ok := a.popQueued(); ok {
				return n, nil
			}
			if n, ok := a.pollInbound(); ok {
				return n, nil
			}
			if i&63 == 0 {
				if time.Now().After(until) || ctx.Err() != nil {
					break
				}
				runtime.Gosched()
			}
		}
	}
	select {
	case n := <-a.notifyQ:
		a.took(n.in)
		return n, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Notification{}, fmt.Errorf("%w: %w", engine.ErrTimeout, ctx.Err())
		}
		return Notification{}, fmt.Errorf("%w: %w", engine.ErrCanceled, ctx.Err())
	case <-a.ctx.Done():
		return Notification{}, engine.ErrClosed
	}
}

// popQueued takes a queued notification, if there is one.
func (a *Agent) popQueued() (Notification, bool) {
	select {
	case n := <-a.notifyQ:
		a.took(n.in)
		return n, true
	default:
		return Notification{}, false
	}
}

// pollInbound takes a notification straight from a peer's endpoint, for
// Recv to return: from a peer that said hello, none of whose
// notifications is queued (the one taken is its next, then), whose
// endpoint no other goroutine is taking from, and that is not done with.
// A message that is not a notification is handled as serve would (a
// refusal and the endpoint's close on a goroutine of their own: serve
// then ends).
func (a *Agent) pollInbound() (Notification, bool) {
	ins := a.inList.Load()
	if ins == nil {
		return Notification{}, false
	}
	for _, in := range *ins {
		if !in.take.TryLock() {
			continue
		}
		if in.done || in.name == "" || in.queued.Load() != 0 {
			in.take.Unlock()
			continue
		}
		b, ok, err := in.ep.TryRecv()
		if err != nil || !ok {
			in.take.Unlock() // (an error is serve's to see)
			continue
		}
		n, got, stop, refuse := a.handle(in, b, true)
		in.done = stop
		in.take.Unlock()
		if stop {
			// The refusal and the close may wait for the peer: not on the
			// caller's goroutine (serve still runs: it sets done, under
			// take, before it ends, so the group cannot be done).
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				if refuse != nil {
					a.refuse(in, refuse)
				}
				in.ep.Close() // (serve then ends)
			}()
		}
		if got {
			return n, true
		}
	}
	return Notification{}, false
}

// Notify sends msg (at most MaxNotify bytes) to the named peer, without
// data. It blocks while the peer's queue, or this agent's share of it, is
// full (ctx bounds the wait).
func (a *Agent) Notify(ctx context.Context, peer string, msg []byte) error {
	var seq uint64 // the Forgets run when the peer was found
	for retried := false; ; retried = true {
		p, err := a.peer(ctx, peer, retried, &seq)
		if err != nil {
			return err
		}
		err = p.Notify(ctx, msg)
		if errors.Is(err, errUnreached) && !retried && p.Err() != nil && !errors.Is(p.Err(), ErrForgotten) {
			continue // the cached peer proved stale when dialed (not forgotten)
		}
		return err
	}
}

// Notify sends msg to the peer (see Agent.Notify).
func (p *Peer) Notify(ctx context.Context, msg []byte) error {
	if len(msg) > MaxNotify {
		return invalid("notification of %d bytes, over %d", len(msg), MaxNotify)
	}
	ep, err := p.conn(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnreached, err)
	}
	return p.send(ctx, ep, encodeNotify(msg))
}

// send sends an encoded notification.
func (p *Peer) send(ctx context.Context, ep *engine.Endpoint, msg []byte) error {
	if err := sendMsg(ep, ctx, msg); err != nil {
		return p.wrap(err)
	}
	p.a.stats.notifySent.Add(1)
	return nil
}
