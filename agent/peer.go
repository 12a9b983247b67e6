package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// Peer is one incarnation of a remote agent as this agent knows it: its
// cached record, the sections' parsed keys and the connection to it
// (dialed on first use). A Peer dropped from the cache (see the package
// doc) stays dead: its operations fail with a PeerError matching
// engine.ErrPeer, and Agent.Peer resolves the name again.
type Peer struct {
	a    *Agent
	md   meta.Metadata
	keys map[string]*peerSection

	mu      sync.Mutex
	ep      *engine.Endpoint
	dialing chan struct{} // closed when the dial in progress ends
	deadErr error
	dead    chan struct{}
	// window bounds the Puts and Gets in flight to the peer
	// (Config.MaxInFlight): an engine list holds slots (see there).
	window *semaphore.Weighted
}

type peerSection struct {
	s   meta.Section
	key engine.RemoteKey
	err error // the key did not parse
}

// errRepublished: the peer republished during the handshake.
var errRepublished = errors.New("republished during the handshake")

// resolve is a lookup in progress, shared by concurrent callers.
type resolve struct {
	done chan struct{}
	p    *Peer
	err  error
	// forgot: the name was forgotten during the lookup (its callers
	// do not look it up again).
	forgot bool
	// seq: the Forgets that had run when it ended (forgetLog.seq).
	seq uint64
}

func (a *Agent) newPeer(md meta.Metadata) *Peer {
	p := &Peer{a: a, md: md, keys: make(map[string]*peerSection, len(md.Sections)), dead: make(chan struct{}),
		window: semaphore.NewWeighted(int64(a.cfg.MaxInFlight))}
	for _, s := range md.Sections {
		ps := &peerSection{s: s}
		ps.key, ps.err = engine.ParseRemoteKey(s.Key)
		if ps.err == nil && uint64(ps.key.Len()) != s.Len {
			ps.err = fmt.Errorf("%w: section %q: key of %d bytes for %d", engine.ErrPeer, s.Name, ps.key.Len(), s.Len)
		}
		p.keys[s.Name] = ps
	}
	return p
}

// Name is the peer's name.
func (p *Peer) Name() string { return p.md.Name }

// Incarnation is the peer's incarnation.
func (p *Peer) Incarnation() uint64 { return p.md.Incarnation }

// Metadata is the peer's record as cached.
func (p *Peer) Metadata() meta.Metadata { return cloneMeta(p.md) }

// Done is closed once the peer was dropped from the cache; Err then says
// why.
func (p *Peer) Done() <-chan struct{} { return p.dead }

// Err is why the peer was dropped (nil while it is cached).
func (p *Peer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deadErr
}

// Transport is the transport of the connection to the peer, and false if
// there is none yet.
func (p *Peer) Transport() (engine.TransportKind, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ep == nil {
		return 0, false
	}
	return p.ep.Transport(), true
}

// Endpoint is the connection to the peer, dialed if there is none yet
// (for its statistics; transfers go through Write, Read and Prepare).
func (p *Peer) Endpoint(ctx context.Context) (*engine.Endpoint, error) {
	if ctx == nil {
		return nil, invalid("nil context")
	}
	return p.conn(ctx)
}

// Section returns the named section of the peer's record.
func (p *Peer) Section(name string) (meta.Section, error) {
	ps, ok := p.keys[name]
	if !ok {
		return meta.Section{}, p.wrap(fmt.Errorf("%w: %q (%w)", ErrNoSection, name, meta.ErrNotFound))
	}
	return ps.s, nil
}

// wrap names the peer in err.
func (p *Peer) wrap(err error) error {
	var pe *PeerError
	if err == nil || errors.As(err, &pe) {
		return err
	}
	p.mu.Lock()
	dead := p.deadErr
	p.mu.Unlock()
	if dead != nil && (errors.Is(err, engine.ErrClosed) || errors.Is(err, engine.ErrPeer)) {
		return dead
	}
	return &PeerError{Name: p.md.Name, Incarnation: p.md.Incarnation, Err: err}
}

// Peer returns the named peer: the cached one, else its record from the
// store (or, without a store, fetched again from the address Connect
// reached it at). Errors match meta.ErrNotFound when no such agent is
// known, meta.ErrUnavailable when the store cannot be reached,
// engine.ErrCanceled or engine.ErrTimeout when ctx ended the lookup.
func (a *Agent) Peer(ctx context.Context, name string) (*Peer, error) {
	var seq uint64
	return a.peer(ctx, name, false, &seq)
}

// peer is Peer; it sets *seq to the Forgets that had run when the peer
// was found (forgetLog.seq). A retry (of a transfer or notification
// whose peer, found at *seq, proved stale when dialed) looks the name
// up only if it was not forgotten since: else it fails as forgotten.
func (a *Agent) peer(ctx context.Context, name string, retry bool, seq *uint64) (*Peer, error) {
	if ctx == nil {
		return nil, invalid("nil context")
	}
	for {
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return nil, engine.ErrClosed
		}
		if p := a.peers[name]; p != nil {
			*seq = a.forgets.seq
			a.mu.Unlock()
			a.stats.cacheHits.Add(1)
			return p, nil
		}
		r := a.resolving[name]
		if r == nil && retry && a.forgets.since(name, *seq) {
			a.mu.Unlock()
			return nil, errForgotten(name, 0)
		}
		if r == nil {
			r = &resolve{done: make(chan struct{})}
			a.resolving[name] = r
			op := &pending{}
			a.pending[op] = true
			addr := a.addrs[name]
			a.mu.Unlock()
			r.p, r.err = a.lookup(ctx, name, addr, op)
			a.mu.Lock()
			if a.resolving[name] == r { // (else Forget took it out)
				delete(a.resolving, name)
			}
			delete(a.pending, op)
			r.forgot = op.forgotten(name)
			r.seq = a.forgets.seq
			*seq = r.seq
			if r.err == nil && r.forgot {
				// Forgotten once cached (Forget dropped it): not
				// handed out either.
				r.p, r.err = nil, errForgotten(name, r.p.md.Incarnation)
			}
			_, gone := a.goneEarly[name]
			a.mu.Unlock()
			if gone {
				a.unwatchIdle(name) // a Gone came during the lookup
			}
			close(r.done)
			if r.err != nil {
				a.stats.countErr(r.err)
			}
			return r.p, r.err
		}
		a.mu.Unlock()
		select {
		case <-r.done:
			if r.err == nil {
				*seq = r.seq
				return r.p, nil
			}
			if r.forgot && !errors.Is(r.err, ErrForgotten) {
				// Forgotten since both began: that, not how that
				// caller's lookup ended (its ctx, say).
				return nil, errForgotten(name, 0)
			}
			// That caller's lookup failed (perhaps for its ctx): try ours.
			if ctx.Err() == nil && !errors.Is(r.err, meta.ErrNotFound) && !r.forgot {
				continue
			}
			return nil, r.err
		case <-ctx.Done():
			return nil, ctxErr(ctx)
		}
	}
}

func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", engine.ErrTimeout, ctx.Err())
	}
	return fmt.Errorf("%w: %w", engine.ErrCanceled, ctx.Err())
}

// lookup finds the named agent's record and caches a peer for it,
// unless the name is forgotten meanwhile (op).
func (a *Agent) lookup(ctx context.Context, name, addr string, op *pending) (*Peer, error) {
	if a.store != nil {
		a.stats.storeLookups.Add(1)
		md, err := a.store.Lookup(ctx, name)
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// The caller's ctx ended it: its error, as a dial's, not
			// the store's (a cancel is no sign of an unreachable store).
			return nil, fmt.Errorf("agent %s: lookup %q: %w (%v)", a.cfg.Name, name, ctxErr(ctx), err)
		}
		if err != nil {
			return nil, fmt.Errorf("agent %s: lookup %q: %w", a.cfg.Name, name, err)
		}
		if md.Name != name || md.Incarnation == 0 {
			return nil, fmt.Errorf("agent %s: lookup %q: %w: record of %q, incarnation %d", a.cfg.Name, name, meta.ErrMalformed, md.Name, md.Incarnation)
		}
		p, err := a.install(a.newPeer(md), nil, op)
		if err == nil {
			// Only a name found is watched (a failed lookup leaves no
			// watch behind), once cached: the store's watch starts
			// from this lookup's read, so a change since reaches p.
			a.watch(name, op)
		}
		return p, err
	}
	if addr == "" {
		return nil, fmt.Errorf("agent %s: %q: %w (no store, and no address: Connect to it first)", a.cfg.Name, name, meta.ErrNotFound)
	}
	p, err := a.connect(ctx, addr, op)
	if err != nil {
		return nil, err
	}
	if p.md.Name != name {
		p.invalidate(fmt.Errorf("%w: %s now serves agent %q", engine.ErrPeer, addr, p.md.Name))
		return nil, fmt.Errorf("agent %s: %q: %w (%s now serves %q)", a.cfg.Name, name, meta.ErrNotFound, addr, p.md.Name)
	}
	return p, nil
}

// install caches p (replacing an older entry of the name) with its
// connection, if there is one already, unless the name was forgotten
// since op began (then it closes ep).
func (a *Agent) install(p *Peer, ep *engine.Endpoint, op *pending) (*Peer, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		p.invalidate(engine.ErrClosed)
		if ep != nil {
			ep.Close()
		}
		return nil, engine.ErrClosed
	}
	if op.forgotten(p.md.Name) {
		a.mu.Unlock()
		p.invalidate(forgottenCause())
		if ep != nil {
			ep.Close()
		}
		return nil, p.Err()
	}
	old := a.peers[p.md.Name]
	if old != nil && old.md.Incarnation == p.md.Incarnation && old.md.Version >= p.md.Version {
		a.mu.Unlock()
		// Already cached as current (a concurrent Connect).
		if ep != nil {
			ep.Close()
		}
		return old, nil
	}
	p.mu.Lock()
	if dead := p.deadErr; dead != nil {
		p.mu.Unlock()
		a.mu.Unlock()
		if ep != nil {
			ep.Close()
		}
		return nil, dead
	}
	a.peers[p.md.Name] = p
	if ep != nil {
		p.ep = ep
		a.stats.outbound.Add(1)
		a.wg.Add(1)
		go p.read(ep)
	}
	p.mu.Unlock()
	a.mu.Unlock()
	if old != nil {
		old.invalidate(fmt.Errorf("%w: replaced by incarnation %016x version %d", engine.ErrPeer, p.md.Incarnation, p.md.Version))
	}
	return p, nil
}

// watch watches the named agent's record in the store, once per name
// found (a peer dropped and found again is watched by the same watch,
// unless its record left the store meanwhile: see unwatchIdle): events
// go to the name's cached peer. Not a name forgotten since op began.
func (a *Agent) watch(name string, op *pending) {
	a.mu.Lock()
	if _, ok := a.watches[name]; ok || a.closed || op.forgotten(name) {
		a.mu.Unlock()
		return
	}
	a.watches[name] = nil // being started
	a.mu.Unlock()
	stop := a.store.Watch(name, a.event)
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		stop()
		return
	}
	a.watches[name] = stop
	_, gone := a.goneEarly[name]
	a.mu.Unlock()
	if gone {
		a.unwatchIdle(name) // a Gone came while the watch started
	}
}

// event takes one event of the store.
func (a *Agent) event(ev meta.Event) {
	a.mu.Lock()
	p := a.peers[ev.Name]
	a.mu.Unlock()
	if p != nil {
		p.event(ev)
	}
	if ev.Kind == meta.Gone {
		a.unwatchIdle(ev.Name)
	}
}

// unwatchIdle stops the named agent's watch if no peer of the name is
// cached or being resolved (its record left the store): else the
// watches of peers gone for good would add up for the agent's life. A
// later lookup that finds the name watches it again (from that lookup).
// Called by the watch itself, which the store allows, and, for a Gone
// that found the watch being started or the name resolving (goneEarly),
// by watch and Peer once that ended.
func (a *Agent) unwatchIdle(name string) {
	a.mu.Lock()
	delete(a.goneEarly, name)
	stop, ok := a.watches[name]
	if !ok || a.closed || a.peers[name] != nil {
		a.mu.Unlock()
		return
	}
	if stop == nil || a.resolving[name] != nil {
		a.goneEarly[name] = struct{}{}
		a.mu.Unlock()
		return
	}
	delete(a.watches, name)
	a.mu.Unlock()
	stop()
}

// event drops the peer if ev says its record is stale.
func (p *Peer) event(ev meta.Event) {
	switch {
	case ev.Kind == meta.Gone && (ev.Meta.Incarnation == 0 || ev.Meta.Incarnation == p.md.Incarnation):
		p.invalidate(fmt.Errorf("%w: its record left the store", engine.ErrPeer))
	case ev.Kind == meta.Put && ev.Meta.Incarnation != p.md.Incarnation:
		p.invalidate(fmt.Errorf("%w: replaced by incarnation %016x", engine.ErrPeer, ev.Meta.Incarnation))
	case ev.Kind == meta.Put && ev.Meta.Version > p.md.Version:
		p.invalidate(fmt.Errorf("%w: republished (version %d)", engine.ErrPeer, ev.Meta.Version))
	}
}

// invalidate drops the peer: from the cache, its keys with it, and its
// connection (failing the transfers in flight on it).
func (p *Peer) invalidate(cause error) {
	a := p.a
	// Out of the cache before Done closes: whoever sees Done and asks
	// for the name again must not be handed this peer.
	a.mu.Lock()
	p.mu.Lock()
	if p.deadErr != nil {
		p.mu.Unlock()
		a.mu.Unlock()
		return
	}
	p.deadErr = &PeerError{Name: p.md.Name, Incarnation: p.md.Incarnation, Err: cause}
	ep := p.ep
	if a.peers[p.md.Name] == p {
		delete(a.peers, p.md.Name)
	}
	close(p.dead)
	p.mu.Unlock()
	a.mu.Unlock()
	a.stats.invalidations.Add(1)
	a.log.Debug().Str("peer", p.md.Name).Uint64("incarnation", p.md.Incarnation).Err(cause).Msg("peer dropped")
	if ep == nil {
		return
	}
	// Closing waits for what runs on the endpoint: not in the store's
	// watch callback nor the reader. Close waits for these.
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		ep.Close()
		return
	}
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		ep.Close()
	}()
}

// read takes what the peer sends on the endpoint this agent dialed:
// invalidations and refusals end it, and so does the endpoint's failure.
func (p *Peer) read(ep *engine.Endpoint) {
	defer p.a.wg.Done()
	defer p.a.stats.outbound.Add(-1)
	for {
		b, err := recvMsg(ep, p.a.ctx)
		if err != nil {
			p.invalidate(fmt.Errorf("%w: connection ended: %w", engine.ErrPeer, err))
			return
		}
		m, err := decode(b)
		switch {
		case err != nil:
			p.invalidate(fmt.Errorf("%w: %w", engine.ErrPeer, err))
		case m.typ == msgInvalidate:
			p.invalidate(fmt.Errorf("%w: republished (version %d)", engine.ErrPeer, m.version))
		case m.typ == msgRefuse:
			p.invalidate(fmt.Errorf("%w: refused: %q", engine.ErrPeer, m.data))
		default:
			p.invalidate(fmt.Errorf("%w: %w", engine.ErrPeer, protoErr("unexpected %v", m.typ)))
		}
		if err := ep.Close(); err != nil {
			p.a.log.Debug().Err(err).Msg("close")
		}
		return
	}
}

// conn returns the connection to the peer, dialing it on first use.
func (p *Peer) conn(ctx context.Context) (*engine.Endpoint, error) {
	for {
		p.mu.Lock()
		switch {
		case p.deadErr != nil:
			err := p.deadErr
			p.mu.Unlock()
			return nil, err
		case p.ep != nil:
			ep := p.ep
			p.mu.Unlock()
			return ep, nil
		case p.dialing != nil:
			ch := p.dialing
			p.mu.Unlock()
			select {
			case <-ch:
				// A dial that failed dropped the peer (its error
				// next turn), unless its caller's ctx ended it: not
				// this caller's, which then dials itself.
				continue
			case <-ctx.Done():
				return nil, ctxErr(ctx)
			}
		}
		ch := make(chan struct{})
		p.dialing = ch
		p.mu.Unlock()
		ep, err := p.dial(ctx)
		if err != nil && ctx.Err() == nil {
			// The peer is not what was cached (another incarnation,
			// a newer record) or not there: drop it; the next use
			// resolves the name again.
			p.invalidate(err)
		}
		p.mu.Lock()
		p.dialing = nil
		if err == nil && p.deadErr != nil {
			err = p.deadErr
		}
		if err == nil {
			p.ep = ep
			p.a.stats.outbound.Add(1)
			p.a.wg.Add(1)
			go p.read(ep)
		}
		close(ch)
		p.mu.Unlock()
		if err != nil {
			if ep != nil {
				ep.Close()
			}
			return nil, p.wrap(err)
		}
		return ep, nil
	}
}

// reachableUnix reports whether path is a unix socket on this node.
func reachableUnix(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// dial connects to the peer: its unix socket if reachable and it answers
// as this peer, else TCP.
func (p *Peer) dial(ctx context.Context) (*engine.Endpoint, error) {
	var errs []error
	if p.md.Unix != "" && reachableUnix(p.md.Unix) {
		ep, _, err := p.a.handshake(ctx, "unix", p.md.Unix, &p.md, false)
		if err == nil {
			return ep, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	if p.md.TCP != "" {
		ep, _, err := p.a.handshake(ctx, "tcp", p.md.TCP, &p.md, false)
		if err == nil {
			return ep, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%w: no address this agent can reach (unix %q, tcp %q)", engine.ErrPeer, p.md.Unix, p.md.TCP)
	}
	return nil, errors.Join(errs...)
}

// handshake dials addr and says hello, expecting the incarnation of the
// cached record (nil: any; then a newer Version than the record's is an
// error matching errRepublished); with wantMeta it also fetches the
// record. It returns the peer's record (its name, incarnation and Version
// only without wantMeta).
func (a *Agent) handshake(ctx context.Context, network, addr string, cached *meta.Metadata, wantMeta bool) (*engine.Endpoint, meta.Metadata, error) {
	a.stats.dials.Add(1)
	ep, err := a.eng.Dial(ctx, network, addr)
	if err != nil {
		return nil, meta.Metadata{}, fmt.Errorf("agent %s: dial %s %s: %w", a.cfg.Name, network, addr, err)
	}
	// The hello is bounded of its own (Config.HelloTimeout): a peer that
	// does not answer would hold the caller until its ctx ends, for ever
	// with none.
	hctx, cancel := context.WithTimeout(ctx, a.cfg.HelloTimeout)
	md, err := a.hello1(hctx, ep, cached, wantMeta)
	expired := hctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err != nil {
		ep.Close()
		if expired {
			err = fmt.Errorf("%w: no answer to the hello within %v (Config.HelloTimeout): %w", engine.ErrTimeout, a.cfg.HelloTimeout, err)
		}
		return nil, meta.Metadata{}, fmt.Errorf("agent %s: %s %s: %w", a.cfg.Name, network, addr, err)
	}
	return ep, md, nil
}

func (a *Agent) hello1(ctx context.Context, ep *engine.Endpoint, cached *meta.Metadata, wantMeta bool) (meta.Metadata, error) {
	var md meta.Metadata
	var expect uint64
	if cached != nil {
		expect = cached.Incarnation
	}
	if err := sendMsg(ep, ctx, encodeHello(a.cfg.Name, a.inc, expect, 0, wantMeta)); err != nil {
		return md, err
	}
	var (
		hello message
		asm   assembler
	)
	for {
		b, err := recvMsg(ep, ctx)
		if err != nil {
			return md, err
		}
		m, err := decode(b)
		if err != nil {
			return md, fmt.Errorf("%w: %w", engine.ErrPeer, err)
		}
		switch {
		case m.typ == msgRefuse:
			return md, fmt.Errorf("%w: refused: %q", engine.ErrPeer, m.data)
		case m.typ == msgInvalidate:
			return md, fmt.Errorf("%w: %w", engine.ErrPeer, errRepublished)
		case m.typ == msgHello && hello.typ == 0:
			if expect != 0 && m.incarnation != expect {
				return md, fmt.Errorf("%w: answered as incarnation %016x of %q, not %016x", engine.ErrPeer, m.incarnation, m.name, expect)
			}
			if cached != nil && m.name != cached.Name {
				// Another agent at the record's address (a socket of this
				// node the record names, with that agent's incarnation,
				// which its own record shows): not the peer.
				return md, fmt.Errorf("%w: answered as %q, not %q", engine.ErrPeer, m.name, cached.Name)
			}
			if cached != nil && m.version > cached.Version {
				return md, fmt.Errorf("%w: %w (version %d, cached %d)", engine.ErrPeer, errRepublished, m.version, cached.Version)
			}
			hello = m
			if !wantMeta {
				md.Name, md.Incarnation, md.Version = m.name, m.incarnation, m.version
				return md, nil
			}
		case m.typ == msgMetaChunk && hello.typ != 0:
			rec, done, err := asm.add(m)
			if err != nil {
				return md, fmt.Errorf("%w: %w", engine.ErrPeer, err)
			}
			if !done {
				continue
			}
			md, err = meta.Decode(rec)
			if err != nil {
				return md, fmt.Errorf("%w: %w", engine.ErrPeer, err)
			}
			if md.Name != hello.name || md.Incarnation != hello.incarnation {
				return md, fmt.Errorf("%w: record of %q/%016x from %q/%016x", engine.ErrPeer, md.Name, md.Incarnation, hello.name, hello.incarnation)
			}
			return md, nil
		default:
			return md, fmt.Errorf("%w: %w", engine.ErrPeer, protoErr("unexpected %v in the handshake", m.typ))
		}
	}
}

// Connect reaches the agent serving at addr (a unix socket path, or
// host:port), fetches its record over that connection and caches it with
// a connection to it (that one, or its unix socket if it is on this
// node: then with the record served there); it returns the agent's
// name, which Peer, Write, Read and Notify then take.
// Without a store, this is how peers are found: a peer dropped later is
// fetched again from addr (for the 1024 names last Connected whose peer
// is not cached: an older one must be Connected again).
func (a *Agent) Connect(ctx context.Context, addr string) (string, error) {
	if ctx == nil {
		return "", invalid("nil context")
	}
	op := a.begin()
	defer a.end(op)
	p, err := a.connect(ctx, addr, op)
	if err != nil {
		a.stats.countErr(err)
		return "", err
	}
	return p.md.Name, nil
}

// connect reaches the agent at addr and caches it, unless its name is
// forgotten meanwhile (op: then it fails, closing the connection).
func (a *Agent) connect(ctx context.Context, addr string, op *pending) (*Peer, error) {
	network := "tcp"
	if strings.Contains(addr, "/") {
		network = "unix"
	}
	var (
		ep  *engine.Endpoint
		md  meta.Metadata
		err error
	)
	for range 3 { // a republication during the handshake: fetch again
		a.stats.sideFetches.Add(1)
		ep, md, err = a.handshake(ctx, network, addr, nil, true)
		if !errors.Is(err, errRepublished) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if md.Name == a.cfg.Name {
		ep.Close()
		return nil, invalid("%s serves this agent (%s)", addr, md.Name)
	}
	a.mu.Lock()
	if op.forgotten(md.Name) {
		a.mu.Unlock()
		ep.Close()
		return nil, errForgotten(md.Name, md.Incarnation)
	}
	a.keepAddr(md.Name, addr)
	a.mu.Unlock()
	if network == "tcp" && a.cfg.NoUnixFromTCP {
		md.Unix = "" // not dialed now, nor by a later dial of the peer
	}
	if network == "tcp" && md.Unix != "" && reachableUnix(md.Unix) {
		// The peer is on this node: its connection is its socket, dialed
		// now (a peer cached with none, no store watching it, would not
		// be dropped when it dies or republishes until used); if that
		// fails, the TCP one stays. The record is the one the agent at
		// the socket serves (its name and incarnation those of the TCP
		// one): the TCP address may have named another agent's socket,
		// with that agent's name and incarnation but sections of its own
		// making.
		if uep, umd, err := a.handshake(ctx, "unix", md.Unix, &md, true); err == nil {
			ep.Close()
			ep, md = uep, umd
		}
	}
	return a.install(a.newPeer(md), ep, op)
}
