package handshake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// ListenConfig is a listener's: its socket and what it makes of the
// connections it accepts.
type ListenConfig[P any] struct {
	Local     *Local
	Network   string // see Network
	Addr      string
	OfferRDMA bool // TCP peers that offer RDMA get RDMA endpoints
	MaxPeers  int  // accepted endpoints (Config.MaxPeers)
	// MaxPeersPerSource bounds the accepted endpoints (lanes included)
	// from one source (see sourceOf): at the bound, the source's oldest
	// idle one is closed to make room, else its newcomer is refused
	// (gxerr.TooManyPeers). 0 means DefaultMaxPeersPerSource(MaxPeers);
	// at most MaxPeers.
	MaxPeersPerSource int
	// MaxPendingPerSource bounds the handshakes in progress from one
	// source (see sourceOf): beyond, the source's oldest is evicted. 0
	// means DefaultMaxPendingPerSource; at most MaxPending.
	MaxPendingPerSource int
	// PeerIdleEvict: an endpoint whose peer made requests but has had no
	// traffic for longer (noted each PeerIdleEvict/4) and has nothing in
	// flight (Peer.InFlight, also none of the other connections of its
	// engine from its source, its TCP lanes) may be closed to make room,
	// after those that never made a request (see admit). <= 0: never.
	PeerIdleEvict time.Duration
	// HandshakeTimeout bounds a connection's handshake (0: 2 s).
	HandshakeTimeout time.Duration
	// Connect makes the endpoint of a connection once admitted.
	Connect Connect[P]
	now     func() time.Time // the log throttle's clock (nil: time.Now; tests set one)
}

// Listener accepts endpoints: each connection's handshake runs on its own
// goroutine; the endpoints are served whether or not Accept is called.
type Listener[P any] struct {
	cfg  ListenConfig[P]
	kind datapath.Kind
	sock socket
	logs *logThrottle // of the failed connections
	// Endpoints made and not yet taken by Accept, oldest first (qmu).
	// Those that failed meanwhile are dropped as the next is queued: the
	// queue holds at most the live endpoints, which MaxPeers bounds, so
	// no endpoint is lost however late Accept is called. ready holds a
	// token while the queue may not be empty.
	qmu    sync.Mutex
	queue  []queued[P]
	ready  chan struct{}
	done   chan struct{}
	once   sync.Once
	ctx    context.Context // canceled by Close: ends handshakes in progress
	cancel context.CancelFunc
	// Handshakes in progress, oldest first, and how many each source
	// has (see startHandshake). Accepted endpoints, oldest first,
	// bounded by MaxPeers (see admit).
	mu        sync.Mutex
	pending   []*pending
	perSource map[string]int
	peers     []*admitted // in admission order, MaxPeers at most
	// Evictions of endpoints closed to make room, each on its own
	// goroutine (see admit): Close waits for them.
	evictions sync.WaitGroup
}

// Listen opens the socket and serves its connections until Close.
func Listen[P any](cfg ListenConfig[P]) (*Listener[P], error) {
	kind, err := Network(cfg.Network)
	if err != nil {
		return nil, err
	}
	sock, err := cfg.Local.listenSocket(cfg.Network, cfg.Addr)
	if err != nil {
		return nil, err
	}
	if cfg.MaxPendingPerSource <= 0 {
		cfg.MaxPendingPerSource = DefaultMaxPendingPerSource
	}
	cfg.MaxPendingPerSource = min(cfg.MaxPendingPerSource, MaxPending)
	if cfg.MaxPeersPerSource <= 0 {
		cfg.MaxPeersPerSource = DefaultMaxPeersPerSource(cfg.MaxPeers)
	}
	cfg.MaxPeersPerSource = min(cfg.MaxPeersPerSource, cfg.MaxPeers)
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = listenTimeout
	}
	l := &Listener[P]{cfg: cfg, kind: kind, sock: sock, ready: make(chan struct{}, 1), done: make(chan struct{}),
		perSource: make(map[string]int), logs: newLogThrottle(cfg.Local.Logger, cfg.now)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	go l.loop()
	return l, nil
}

// Kind is the kind of the connections: KindIPC or KindTCP.
func (l *Listener[P]) Kind() datapath.Kind { return l.kind }

// Addr is the socket's path, or the host:port bound.
func (l *Listener[P]) Addr() string { return l.sock.addr }

func (l *Listener[P]) loop() {
	defer close(l.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	if l.cfg.PeerIdleEvict > 0 {
		stop := make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); l.watchIdle(stop) }()
		defer close(stop)
	}
	for {
		t, cred, raddr, err := l.sock.accept()
		if err != nil {
			if errors.Is(err, ipc.ErrPeerRefused) {
				l.logs.warn().Err(err).Msg("peer refused")
				continue
			}
			if l.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, ipc.ErrClosed) {
				// Out of fds, a connection reset before accept...:
				// keep serving.
				l.logs.warn().Err(err).Msg("accept failed")
				select {
				case <-time.After(10 * time.Millisecond):
					continue
				case <-l.ctx.Done():
				}
			}
			return // closed
		}
		p := l.startHandshake(t, sourceOf(raddr, cred))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.endHandshake(p)
			ep, a, hello, err := l.serve(p, t, cred, raddr)
			if err != nil {
				// One that Close ended (its ctx canceled) is no peer's
				// failure: not logged (nor one whose own deadline passed
				// as Close came).
				if l.ctx.Err() == nil || !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					l.logs.warn().Err(err).Msg("handshake failed")
				}
				return
			}
			if hello.Caps&wire.CapLane != 0 {
				return // a lane of an endpoint already accepted: served only
			}
			l.enqueue(ep, a)
		}()
	}
}

// watchIdle notes the admitted peers' activity (see admitted) each
// PeerIdleEvict/4 until stop closes: a peer's idle time is then known
// within a quarter of PeerIdleEvict, and never overestimated.
func (l *Listener[P]) watchIdle(stop <-chan struct{}) {
	t := time.NewTicker(max(l.cfg.PeerIdleEvict/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			l.mu.Lock()
			l.noteActivityLocked(time.Now())
			l.mu.Unlock()
		}
	}
}

// noteActivityLocked records now as the last activity of the peers that
// had traffic since the last look.
func (l *Listener[P]) noteActivityLocked(now time.Time) {
	for _, a := range l.peers {
		if a.peer != nil && a.peer.TakeActivity() {
			a.seen = now
		}
	}
}

// queued is an endpoint waiting for Accept, and its admission (whose
// peer is the endpoint's).
type queued[P any] struct {
	ep P
	a  *admitted
}

// ended reports whether a queued endpoint has failed, or is being closed
// to make room (admit chose it: it fails once its Bye is out, see
// Peer.Evict).
func (l *Listener[P]) ended(q queued[P]) bool {
	l.mu.Lock()
	evicted, peer := q.a.evicted, q.a.peer
	l.mu.Unlock()
	return evicted || peer.Err() != nil
}

// enqueue hands a new endpoint to Accept, dropping the queued ones that
// ended since they were queued.
func (l *Listener[P]) enqueue(ep P, a *admitted) {
	l.qmu.Lock()
	live := l.queue[:0]
	for _, q := range l.queue {
		if !l.ended(q) {
			live = append(live, q)
		}
	}
	clear(l.queue[len(live):])
	l.queue = append(live, queued[P]{ep: ep, a: a})
	l.qmu.Unlock()
	l.signal()
}

// signal leaves a token in ready (one is enough).
func (l *Listener[P]) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Accept returns the next endpoint a peer opened: gxerr.Closed once the
// listener is closed, gxerr.Canceled or Timeout (wrapping ctx's error)
// when ctx ends first. An endpoint that ended while it waited for Accept
// (its peer closed it or went, it was closed to make room) is dropped,
// not returned, as is one being closed to make room: Accept waits for a
// live one. One that ends just after Accept took it is returned all the
// same (its Err says why).
func (l *Listener[P]) Accept(ctx context.Context) (P, error) {
	var zero P
	for {
		select { // closed first: the select below picks at random among ready cases
		case <-l.done:
			return zero, gxerr.Closed
		default:
		}
		l.qmu.Lock()
		for len(l.queue) > 0 {
			q := l.queue[0]
			l.queue[0] = queued[P]{}
			l.queue = l.queue[1:]
			if l.ended(q) {
				continue // ended meanwhile: let go of it
			}
			more := len(l.queue) > 0
			l.qmu.Unlock()
			if more {
				l.signal() // for another Accept
			}
			return q.ep, nil
		}
		l.qmu.Unlock()
		select {
		case <-l.ready:
		case <-l.done:
			return zero, gxerr.Closed
		case <-ctx.Done():
			return zero, gxerr.Ctx("accept", ctx.Err())
		}
	}
}

// Close stops accepting (handshakes in progress fail) and returns once
// every handshake has ended; endpoints already open stay open.
// Idempotent: the socket's Close error the first time.
func (l *Listener[P]) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.sock.close()
		<-l.done // every handshake has ended: nothing is queued after
		// nor is any eviction started (admit runs in handshakes).
		l.evictions.Wait()
		l.logs.flush()
		// Accept returns none of the endpoints left: let go of them
		// (they are served all the same).
		l.qmu.Lock()
		clear(l.queue)
		l.queue = nil
		l.qmu.Unlock()
	})
	return err
}

// serve is the listener's side of a connection's handshake: the
// endpoint made, and its admission (see admitted).
func (l *Listener[P]) serve(p *pending, t wire.Transport, cred *ipc.Cred, raddr string) (P, *admitted, wire.Hello, error) {
	var zero P
	local := l.cfg.Local
	wc := wire.NewConn(t, local.ConnConfig(l.kind))
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.HandshakeTimeout)
	defer cancel()
	var hello wire.Hello
	fail := func(code wire.Status, err error) (P, *admitted, wire.Hello, error) {
		if code != wire.StatusOK {
			_ = wc.Send(wire.NewError(0, code, err.Error()))
		}
		_ = wc.Close()
		return zero, nil, hello, err
	}
	f, err := wc.Recv(ctx)
	if err != nil {
		return fail(wire.StatusOK, err)
	}
	if err := f.Decode(&hello); err != nil {
		_ = f.CloseFDs()
		return fail(wire.StatusOK, err)
	}
	if cred != nil {
		if err := checkIdentity(hello, *cred); err != nil {
			return fail(wire.StatusRefused, err)
		}
	}
	if l.kind == datapath.KindTCP {
		if err := authListener(ctx, wc, local.Secret, hello); err != nil {
			return fail(wire.StatusOK, err) // refusals are answered by authListener
		}
	}
	ack, err := wire.Negotiate(local.HelloFor(l.kind, l.cfg.OfferRDMA && hello.Caps&wire.CapLane == 0), hello)
	if err != nil {
		return fail(wire.StatusVersion, err)
	}
	// Past this point the connection is not evicted as a pending
	// handshake; it counts toward MaxPeers instead, from admission on
	// (its dialer may make requests before Connect below returns here).
	a, err := l.admit(p, hello)
	if err != nil {
		return fail(wire.StatusNoResources, err)
	}
	if err := wc.Send(&ack); err != nil {
		l.forget(a)
		return fail(wire.StatusOK, err)
	}
	ep, peer, err := l.cfg.Connect(context.WithValue(ctx, madeKey{}, func(p Peer) error { return l.made(a, p) }), wc, hello, pathFor(l.kind, ack.Accepted), raddr, false)
	if err != nil {
		l.forget(a)
		return ep, nil, hello, err
	}
	l.mu.Lock()
	recorded := a.peer != nil // by Made: evicted since (if so) as any made endpoint
	a.peer = peer
	evicted := a.evicted && !recorded
	l.mu.Unlock()
	if evicted { // chosen to make room while it was connecting, and Connect did not call Made: it made no request yet
		peer.Evict("closed to make room for another peer (it made no request; Config.MaxPeers)")
		return zero, nil, hello, peer.Err() // not handed to Accept: it is closed already
	}
	return ep, a, hello, nil
}

// admitted is one admitted peer: peer is nil until its endpoint is made;
// one evicted meanwhile is failed once it is. A lane (wire.CapLane) is
// not evicted while an endpoint of its engine from its source is admitted
// (a lane is dialed as its endpoint was; another source claiming an
// engine's id, which its keys carry, gets no such lanes): it is an extra
// connection of an endpoint whose requests may all go over its other
// connections (small transfers do), so that it looks idle while its
// endpoint is busy, and its failure fails that endpoint at the dialer.
// An endpoint has MaxLanes-1 lanes at most: of an engine's lanes from a
// source, the oldest MaxLanes-1 per endpoint of that engine from that
// source here are spared. A lane
// beyond, or with no such endpoint here (its endpoint gone, or a peer
// merely claiming CapLane), is evicted like any other peer.
//
// seen is when the listener last saw traffic of the peer's (zero:
// never; see noteActivityLocked), at most PeerIdleEvict/4 after it came:
// the peer has been idle for at least the time since.
type admitted struct {
	peer    Peer
	engine  wire.EngineID // the peer's (Hello.EngineID)
	source  string        // see sourceOf
	lane    bool
	evicted bool
	seen    time.Time
}

// made records a's endpoint p as made (see Made): an error if a was
// chosen to make room meanwhile.
func (l *Listener[P]) made(a *admitted, p Peer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.evicted {
		return errors.New("closed to make room for another peer while it was connecting (it made no request; Config.MaxPeers)")
	}
	a.peer = p
	return nil
}

// forget drops an admission whose endpoint was never made.
func (l *Listener[P]) forget(a *admitted) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, x := range l.peers {
		if x == a {
			l.peers = append(l.peers[:i], l.peers[i+1:]...)
			return
		}
	}
}

// pending is a connection whose handshake is in progress.
type pending struct {
	t       wire.Transport
	source  string // see sourceOf
	evicted bool   // closed to make room (under Listener.mu)
}

// sourceOf is the source a connection counts against for
// MaxPendingPerSource: a TCP peer's IP address (an IPv6 peer's /64, the
// block one host is commonly given, so that it cannot take a slot per
// address), a unix socket peer's pid. Every unix peer has this process's
// uid (the socket refuses others: see ipc.Listen), so a hostile one could
// harm this process in worse ways than by forking to flood the slots;
// the pid still keeps one runaway process from evicting the handshakes
// of the others.
func sourceOf(raddr string, cred *ipc.Cred) string {
	if cred != nil {
		return fmt.Sprintf("pid %d", cred.PID)
	}
	ap, err := netip.ParseAddrPort(raddr)
	if err != nil {
		return raddr
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	pfx, err := ip.WithZone("").Prefix(64)
	if err != nil {
		return ip.String()
	}
	return pfx.String()
}

// PeerSource is sourceOf for an accepted peer: one at raddr over TCP,
// else the unix socket peer of pid (its hello's pid, which the handshake
// checked against the socket's credentials).
func PeerSource(raddr string, pid uint32) string {
	if raddr == "" {
		return sourceOf("", &ipc.Cred{PID: pid})
	}
	return sourceOf(raddr, nil)
}

// startHandshake records a connection's handshake from source. It
// evicts (closes) a pending one to make room: the source's oldest when
// the source has MaxPendingPerSource already; else, when all MaxPending
// slots are taken, the oldest of the source that holds the most (a
// silent client cannot hold a slot against newer ones, and a source
// flooding the listener evicts its own connections, not others'). It
// never blocks the accept loop.
func (l *Listener[P]) startHandshake(t wire.Transport, source string) *pending {
	p := &pending{t: t, source: source}
	l.mu.Lock()
	var victim *pending
	switch {
	case l.perSource[source] >= l.cfg.MaxPendingPerSource:
		for _, q := range l.pending {
			if q.source == source {
				victim = q
				break
			}
		}
	case len(l.pending) >= MaxPending:
		for _, q := range l.pending {
			if victim == nil || l.perSource[q.source] > l.perSource[victim.source] {
				victim = q
			}
		}
	}
	if victim != nil {
		victim.evicted = true
		l.dropPendingLocked(victim)
	}
	l.pending = append(l.pending, p)
	l.perSource[source]++
	l.mu.Unlock()
	if victim != nil {
		_ = victim.t.Close() // its handshake fails at its next read
	}
	return p
}

// endHandshake forgets p (its handshake ended, well or not).
func (l *Listener[P]) endHandshake(p *pending) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropPendingLocked(p)
}

func (l *Listener[P]) dropPendingLocked(p *pending) {
	for i, q := range l.pending {
		if q == p {
			l.pending = append(l.pending[:i], l.pending[i+1:]...)
			if l.perSource[p.source]--; l.perSource[p.source] <= 0 {
				delete(l.perSource, p.source)
			}
			return
		}
	}
}

// admit takes p out of the pending handshakes (it can no longer be
// evicted as one) and makes room for one more peer: at MaxPeers
// endpoints, or MaxPeersPerSource from p's source (then of that source
// only), the oldest that never made a request is closed (never a lane
// of an admitted endpoint within MaxLanes: see admitted), else one
// still connecting, else (PeerIdleEvict > 0) the one idle the longest,
// if for longer than PeerIdleEvict; never one with work in flight
// (Peer.InFlight). If there is none, p is refused with
// gxerr.TooManyPeers.
func (l *Listener[P]) admit(p *pending, hello wire.Hello) (*admitted, error) {
	l.mu.Lock()
	if p.evicted {
		l.mu.Unlock()
		return nil, errors.New("handshake evicted by newer connections")
	}
	l.dropPendingLocked(p)
	live := l.peers[:0]
	for _, a := range l.peers {
		if a.peer == nil || a.peer.Err() == nil {
			live = append(live, a)
		}
	}
	clear(l.peers[len(live):])
	l.peers = live
	own := 0
	for _, a := range l.peers {
		if a.source == p.source {
			own++
		}
	}
	// At its source's bound, p takes the place of one of the source's
	// own peers; else at MaxPeers, of anyone's.
	atSourceBound := own >= l.cfg.MaxPeersPerSource
	var victim *admitted
	var idleFor time.Duration // the victim's idle time, when it made requests
	if atSourceBound || len(l.peers) >= l.cfg.MaxPeers {
		// An endpoint that never carried a request and has nothing in
		// flight; else one still connecting (admitted, its endpoint not
		// made yet, so no request served): of those, the oldest of the
		// source holding the most peers (p's counted), so that a source
		// opening endpoints in a loop closes its own, not other
		// sources' idle ones (at its bound, only its own are
		// candidates); else (PeerIdleEvict) one idle for longer, with
		// nothing in flight: of the source holding the most, the one
		// idle the longest (see withLanesLocked). Lanes of an admitted endpoint are
		// spared, the oldest MaxLanes-1 per endpoint of their engine
		// from their source (see admitted).
		endpoints := make(map[group]int, len(l.peers))
		sources := map[string]int{p.source: 1}
		for _, a := range l.peers {
			if !a.lane {
				endpoints[group{a.engine, a.source}]++
			}
			sources[a.source]++
		}
		lanes := make(map[group]int, len(endpoints))
		spare := make(map[*admitted]bool)
		for _, a := range l.peers {
			if g := (group{a.engine, a.source}); a.lane && lanes[g] < endpoints[g]*(MaxLanes-1) {
				lanes[g]++
				spare[a] = true
			}
		}
		spared := func(a *admitted) bool { return spare[a] }
		// pickBy: of the candidates, the source holding the most first;
		// on a tie the first in admission order, or the one first is
		// true of when it is given.
		pickBy := func(candidate func(a *admitted) bool, first func(a, b *admitted) bool) int {
			pick := -1
			for i, a := range l.peers {
				if (atSourceBound && a.source != p.source) || spared(a) || !candidate(a) {
					continue
				}
				if pick < 0 {
					pick = i
					continue
				}
				b := l.peers[pick]
				if sources[a.source] > sources[b.source] || sources[a.source] == sources[b.source] && first != nil && first(a, b) {
					pick = i
				}
			}
			return pick
		}
		now := time.Now()
		l.noteActivityLocked(now)
		seen, busy := l.withLanesLocked(endpoints)
		pick := pickBy(func(a *admitted) bool { return a.peer != nil && seen(a).IsZero() && !busy(a) }, nil)
		if pick < 0 {
			pick = pickBy(func(a *admitted) bool { return a.peer == nil }, nil)
		}
		if pick < 0 && l.cfg.PeerIdleEvict > 0 {
			pick = pickBy(func(a *admitted) bool {
				return a.peer != nil && !seen(a).IsZero() && now.Sub(seen(a)) > l.cfg.PeerIdleEvict && !busy(a)
			}, func(a, b *admitted) bool { return seen(a).Before(seen(b)) })
			if pick >= 0 {
				idleFor = now.Sub(seen(l.peers[pick]))
			}
		}
		if pick >= 0 {
			victim = l.peers[pick]
			victim.evicted = true
			l.peers = append(l.peers[:pick], l.peers[pick+1:]...)
		}
		if victim == nil {
			l.mu.Unlock()
			if atSourceBound {
				return nil, fmt.Errorf("%w: %d endpoints from %s, all in use (Config.MaxPeersPerSource)", gxerr.TooManyPeers, own, p.source)
			}
			return nil, fmt.Errorf("%w: %d endpoints, all in use (Config.MaxPeers)", gxerr.TooManyPeers, l.cfg.MaxPeers)
		}
	}
	a := &admitted{engine: hello.EngineID, lane: hello.Caps&wire.CapLane != 0, source: p.source}
	l.peers = append(l.peers, a)
	var ep Peer // the victim's endpoint, if made (read under mu: serve sets it)
	if victim != nil {
		ep = victim.peer
	}
	if ep != nil {
		l.evictions.Add(1) // under mu, with the admission: a Wait ordered after it waits for the eviction
	}
	l.mu.Unlock()
	if ep != nil {
		why := "it made no request"
		if idleFor > 0 {
			why = fmt.Sprintf("idle for %v, nothing in flight; Config.PeerIdleEvict", idleFor.Round(time.Millisecond))
		}
		l.logs.warn().Str("peer", ep.Name()).Str("why", why).Msg("idle peer closed to make room (Config.MaxPeers, MaxPeersPerSource)")
		// Off p's handshake: the victim's Evict waits for its Bye to
		// be sent, then for it to hang up (ctrlchan's Evict), which is
		// no business of p's. Its slot is free already (out of peers,
		// and Accept skips it: evicted), and Close waits for it.
		go func() {
			defer l.evictions.Done()
			ep.Evict("closed to make room for another peer (" + why + "; Config.MaxPeers)")
		}()
	}
	return a, nil
}

// group is the connections of one engine from one source: its
// endpoints and their TCP lanes.
type group struct {
	engine wire.EngineID
	source string
}

// withLanesLocked tells, for an admitted peer, when it was last seen
// active and whether it has work in flight, its lanes counted for an
// endpoint: a TCP endpoint's large transfers go over its lanes, its own
// connection idle meanwhile, and closing it closes them. The listener
// cannot tell which endpoint a lane belongs to: the lanes' work in
// flight counts for each endpoint of their engine, their activity only
// for the engine's one endpoint (so that an engine keeping one lane
// active does not keep its several endpoints busy). endpoints counts the
// endpoints (not lanes) of each group, as admit has. busy asks the peers
// once each.
func (l *Listener[P]) withLanesLocked(endpoints map[group]int) (seen func(*admitted) time.Time, busy func(*admitted) bool) {
	laneSeen := make(map[group]time.Time)
	var lanes []*admitted
	for _, a := range l.peers {
		if g := (group{a.engine, a.source}); a.lane && a.peer != nil {
			lanes = append(lanes, a)
			if a.seen.After(laneSeen[g]) {
				laneSeen[g] = a.seen
			}
		}
	}
	seen = func(a *admitted) time.Time {
		g := group{a.engine, a.source}
		if !a.lane && endpoints[g] == 1 && laneSeen[g].After(a.seen) {
			return laneSeen[g]
		}
		return a.seen
	}
	inFlight := make(map[*admitted]bool)
	asked := func(a *admitted) bool {
		v, ok := inFlight[a]
		if !ok {
			v = a.peer.InFlight()
			inFlight[a] = v
		}
		return v
	}
	busy = func(a *admitted) bool {
		if asked(a) {
			return true
		}
		if a.lane {
			return false
		}
		for _, ln := range lanes {
			if ln.engine == a.engine && ln.source == a.source && asked(ln) {
				return true
			}
		}
		return false
	}
	return seen, busy
}
