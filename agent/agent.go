// Package agent gives engines names: an Agent has a unique name and a
// random incarnation id, publishes how to reach it and named memory
// sections (meta.Metadata), finds other agents and their sections by
// name, and moves lists of descriptors to and from them with one Xfer,
// optionally followed by a notification the target receives only once
// the data is in its memory.
//
// # Finding peers
//
// With a meta.Store (package etcdmeta: etcd), an agent publishes its
// record there, looks peers up by name and watches the records of the
// peers it talks to. Without one, peers are found by address (Connect):
// every agent serves its own record on its endpoints (the side channel).
// Either way the record of a peer is cached per incarnation, and dropped,
// together with the peer's parsed keys and the connection to it (so its
// imports, memory regions and mappings are released), when the peer
// republishes (a section added or withdrawn), dies, its record leaves the
// store, the connection fails, or the application is done with it
// (Forget); transfers in flight to it then fail with
// a PeerError matching engine.ErrPeer. A restarted agent of the same name
// has a new incarnation: it is another peer. Once a peer is cached the
// transfer path makes no Store call.
//
// # Connections
//
// The connection to a peer is dialed on first use, once (concurrent first
// uses share the dial), and reused: over its unix socket when that socket
// is reachable from here (and answers with the peer's name), else over TCP
// (where the engine negotiates RDMA when both sides have NICs). A peer
// Connected keeps the connection Connect reached it on, or, on this node
// reached over TCP, its socket, dialed by Connect: with no store watching
// it, its connection is what tells the agent that it died or republished.
//
// # Transfers
//
// Write and Read take a list of descriptors (a local slice, a remote
// section, an offset in it); every descriptor is checked first (nothing
// is submitted if one is invalid: a DescError naming it, matching
// engine.ErrInvalid), descriptors adjacent in both local and remote memory
// are coalesced into one Put or Get, and all of them are issued at once.
// Prepare does the checks and the key work once for a fixed pair of lists;
// its Write and Read post any subset by index.
//
// # Notifications
//
// WithNotify makes the Xfer send a message once every descriptor has
// completed; the target's Recv returns it only after the data of that
// Xfer is in its memory (Endpoint.Send's ordering). Notify sends one
// without data. Notifications from one sender arrive in order (the order
// of its sends on one connection: a sender that reconnects, after the
// target republished, starts a new sequence); when the application does
// not Recv, the bounded queue fills and senders block (nothing is dropped
// while both agents live). Each source of senders (engine.Endpoint.Source:
// a process over unix, an IP address over TCP, whatever the names and
// the number of connections of its agents) holds at most its share of
// the queue, NotifyQueue divided among the sources with notifications
// queued plus one: one that floods blocks at its share (half the queue
// while it is alone), and another's notifications still go in behind
// that share. A connection that closes with a notification not yet
// queued is kept until it is; while a source has 16 such connections, the
// hellos of its new ones wait (their dial waits, as far as the dialer's
// context and Config.HelloTimeout let it): a source cycling connections
// that each send one notification and close is held, not kept without
// bound.
// The sender's name in a Notification is what it
// said in its hello: authenticated only as far as the engine authenticates
// its peers (Config.ClusterSecret over TCP, the uid over unix).
//
// # Republishing
//
// Publish and Withdraw give the record a new Version; every peer holding
// the previous one drops it with its connection (transfers in flight to
// this agent fail). Publish the sections before peers start transferring.
// When the store cannot be reached, Publish and Withdraw fail with an
// error matching meta.ErrUnavailable, but the record is changed all the
// same (the section is offered, or withdrawn; peers connected to this
// agent are told): the agent writes it to the store once it answers.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// Config configures an Agent.
type Config struct {
	// Name is the agent's name, unique in the cluster (1 to
	// meta.MaxName bytes of UTF-8 without control characters:
	// meta.CheckName).
	Name string
	// Engine is the caller's engine; the agent does not close it.
	Engine *engine.Engine
	// Unix and TCP are the addresses the agent listens at ("" for
	// none): a socket path, and a host:port peers can reach ("host:0"
	// picks a port). An agent without either can still reach peers but
	// not be reached.
	Unix, TCP string
	// Store is the cluster metadata service. The agent owns it: Close
	// closes it (withdrawing the record). nil: no service; peers are
	// found by address (Connect).
	Store meta.Store
	// Logger receives the agent's logs; default zerolog.Nop().
	Logger zerolog.Logger
	// NotifyQueue bounds the received notifications waiting for Recv
	// (default 4096); when it is full, senders block, and so does a
	// sender that holds its share of it (see Notifications).
	NotifyQueue int
	// InvalidateWait is how long Withdraw waits for the peers holding
	// this agent's record to drop it (close their connection) before it
	// closes those connections itself. Default 5 s.
	InvalidateWait time.Duration
	// MaxInFlight bounds the Puts and Gets in flight to one peer; the
	// rest of a transfer is issued as they complete. A transfer's runs
	// (coalesced descriptors) go to the engine as lists
	// (Endpoint.PutList, GetList): its first runs, issued by the caller
	// (8, or as many as hold up to an eighth of a Write's or Read's
	// bytes and 8 MiB), then lists of up to 1024; the first list counts
	// as min(k, 8, MaxInFlight) of its k runs, the others as
	// min(k, MaxInFlight - 8).
	// (The endpoint also keeps at most 64 requests its peer serves in
	// progress, making further ones wait.) Default 48, at most 64.
	MaxInFlight int
	// StoreTimeout bounds the Store calls the agent makes without a
	// caller's context (Publish, Withdraw, Close). Default 10 s.
	StoreTimeout time.Duration
	// HelloTimeout bounds the agent's handshake on each connection it
	// dials (its hello, the peer's answer and, for Connect, the peer's
	// record), after the engine's own: a peer that does not answer in
	// time (hung, or hostile) fails the dial with an error matching
	// engine.ErrTimeout, though the caller's context lasts longer.
	// Default 10 s.
	HelloTimeout time.Duration
	// NoUnixFromTCP: a record Connect fetches over TCP is not trusted
	// with the sockets of this node: the unix socket it names is not
	// dialed, then or later (the peer is reached over TCP; its cached
	// record names no socket). For an agent that Connects at addresses
	// untrusted peers name: a TCP peer, of any uid, could else make it
	// connect to any unix socket of the node.
	NoUnixFromTCP bool
}

// Agent is a named engine in a cluster. It is safe for concurrent use.
type Agent struct {
	cfg   Config
	eng   *engine.Engine
	log   zerolog.Logger
	inc   uint64
	store meta.Store

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	listeners []*engine.Listener
	notifyQ   chan Notification
	senders   atomic.Int64 // sources with notifications in notifyQ

	mu        sync.Mutex
	closed    bool
	md        meta.Metadata       // this agent's record
	sections  map[string]section  // this agent's sections
	peers     map[string]*Peer    // live cached peers by name
	resolving map[string]*resolve // lookups in progress
	pending   map[*pending]bool   // lookups and Connects in progress
	forgets   forgetLog           // the Forgets so far (a retry's lookup checks them)
	addrs     map[string]string   // side-channel addresses by name (Connect)
	// addrOrder is addrs' names, the least recently Connected first;
	// maxAddrs bounds the names kept whose peer is not cached (see
	// keepAddr).
	addrOrder []string
	maxAddrs  int
	inbound   map[*inbound]struct{}
	sources   map[string]*source // of the inbound endpoints (see source)
	watches   map[string]func()  // store watches by peer name
	// goneEarly names the watches a Gone found being started or their
	// name resolving: unwatchIdle looks at them again once that ends.
	goneEarly map[string]struct{}
	// storeFailed is the latest Version the store failed to take
	// (unreachable); storeRetrying: retryStore's goroutine runs.
	storeFailed   uint64
	storeRetrying bool
	// inList is inbound's keys, made again under mu at each change: what
	// a spinning Recv polls.
	inList atomic.Pointer[[]*inbound]

	// maxHeldClosed: see the const (a field for tests).
	maxHeldClosed int

	wg    sync.WaitGroup
	stats counters
	// scratch holds *scratch: the slices of engine lists being issued;
	// runPool *runBufs: the runs of transfers that ended.
	scratch, runPool sync.Pool
}

type section struct {
	slice engine.Slice
	key   engine.RemoteKey
}

// New starts an agent: it listens at the configured addresses, publishes
// its record (with no sections yet) to the store, if any, and serves its
// peers until Close.
func New(ctx context.Context, cfg Config) (_ *Agent, err error) {
	switch {
	case cfg.Engine == nil:
		return nil, invalid("agent: no engine")
	case cfg.Name == "" || len(cfg.Name) > meta.MaxName:
		return nil, invalid("agent name of %d bytes", len(cfg.Name))
	case meta.CheckName(cfg.Name) != nil: // no record could carry it
		return nil, invalid("agent name %q is not UTF-8 without control characters", cfg.Name)
	}
	if cfg.NotifyQueue <= 0 {
		cfg.NotifyQueue = 4096
	}
	if cfg.InvalidateWait <= 0 {
		cfg.InvalidateWait = 5 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 48
	}
	cfg.MaxInFlight = min(cfg.MaxInFlight, 64)
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = 10 * time.Second
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 10 * time.Second
	}
	var inc uint64
	for inc == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("agent: incarnation: %w", err)
		}
		inc = binary.LittleEndian.Uint64(b[:])
	}
	a := &Agent{
		cfg: cfg, eng: cfg.Engine, inc: inc, store: cfg.Store,
		log:       cfg.Logger.With().Str("agent", cfg.Name).Logger(),
		notifyQ:   make(chan Notification, cfg.NotifyQueue),
		sections:  map[string]section{},
		peers:     map[string]*Peer{},
		resolving: map[string]*resolve{},
		pending:   map[*pending]bool{},
		addrs:     map[string]string{},
		maxAddrs:  maxAddrs,
		inbound:   map[*inbound]struct{}{},
		sources:   map[string]*source{},
		watches:   map[string]func(){},
		goneEarly: map[string]struct{}{},
	}
	a.maxHeldClosed = maxHeldClosed
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.md = meta.Metadata{Name: cfg.Name, Incarnation: inc, Version: 1}
	defer func() {
		if err != nil {
			_ = a.Close()
		}
	}()
	if cfg.Unix != "" {
		l, err := a.eng.Listen("unix", cfg.Unix)
		if err != nil {
			return nil, fmt.Errorf("agent: listen unix %s: %w", cfg.Unix, err)
		}
		a.listeners = append(a.listeners, l)
		a.md.Unix = l.Addr()
	}
	if cfg.TCP != "" {
		l, err := a.eng.Listen("tcp", cfg.TCP)
		if err != nil {
			return nil, fmt.Errorf("agent: listen tcp %s: %w", cfg.TCP, err)
		}
		a.listeners = append(a.listeners, l)
		a.md.TCP = l.Addr()
	}
	if r := a.eng.RDMA(); r.Available {
		for i, n := range r.NICs {
			nic := meta.NIC{Device: n}
			if i == 0 {
				nic.Port, nic.GID = r.Port, r.GID
			}
			a.md.NICs = append(a.md.NICs, nic)
		}
	}
	for _, l := range a.listeners {
		a.wg.Add(1)
		go a.acceptLoop(l)
	}
	if a.store != nil {
		if err := a.store.Publish(ctx, a.md); err != nil {
			return nil, fmt.Errorf("agent %s: publish: %w", cfg.Name, err)
		}
	}
	a.log.Debug().Uint64("incarnation", inc).Str("unix", a.md.Unix).Str("tcp", a.md.TCP).Msg("agent started")
	return a, nil
}

// Name is the agent's name.
func (a *Agent) Name() string { return a.cfg.Name }

// Incarnation is this life's id (random, never 0).
func (a *Agent) Incarnation() uint64 { return a.inc }

// Engine is the agent's engine.
func (a *Agent) Engine() *engine.Engine { return a.eng }

// Metadata returns a copy of the agent's current record.
func (a *Agent) Metadata() meta.Metadata {
	a.mu.Lock()
	defer a.mu.Unlock()
	return cloneMeta(a.md)
}

func cloneMeta(m meta.Metadata) meta.Metadata {
	m.NICs = slices.Clone(m.NICs)
	m.Sections = slices.Clone(m.Sections)
	return m
}

// emulated reports whether loc is memory of an emulated device
// (dma/hlsim), which peers must label so (meta.Section.Emulated).
func (a *Agent) emulated(loc engine.Location) bool {
	if !loc.IsGaudi() {
		return false
	}
	attached := strings.HasPrefix(loc.String(), "attached")
	for _, d := range a.eng.Devices() {
		if d.Index == loc.Device() && d.Attached == attached {
			return d.Emulated
		}
	}
	return false
}

// maxRecord bounds this agent's record (meta.MaxRecord; tests lower it).
var maxRecord = meta.MaxRecord

// Publish offers s under name: it exports a key granting exactly s and
// republishes the record (a new Version: peers holding the previous one
// drop it and fetch the new one on their next use). name follows the
// rules of an agent's name (meta.CheckName); ErrInvalid otherwise, and
// also for a section that would take the record past meta.MaxRecord
// bytes (some tens of thousands of sections: each takes its name, its
// location and its key, about 150 bytes with a short name).
func (a *Agent) Publish(name string, s engine.Slice) error {
	if name == "" || len(name) > meta.MaxName {
		return invalid("section name of %d bytes", len(name))
	}
	if meta.CheckName(name) != nil { // a section's name follows an agent's rules
		return invalid("section name %q is not UTF-8 without control characters", name)
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("agent: section %q: %w", name, err)
	}
	if s.Buffer() == nil || s.Len() <= 0 {
		return invalid("section %q: empty slice", name)
	}
	key, err := s.Buffer().Export()
	if err != nil {
		return fmt.Errorf("agent: section %q: %w", name, err)
	}
	if s.Offset() != 0 || s.Len() != s.Buffer().Size() {
		key = key.Slice(s.Offset(), s.Len())
		if err := key.Err(); err != nil {
			return fmt.Errorf("agent: section %q: %w", name, err)
		}
	}
	loc := s.Buffer().Location()
	ms := meta.Section{Name: name, Len: uint64(s.Len()), Location: loc.String(), Emulated: a.emulated(loc), Key: key.Bytes()}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return engine.ErrClosed
	}
	if _, ok := a.sections[name]; ok {
		a.mu.Unlock()
		return invalid("section %q is already published", name)
	}
	if len(a.md.Sections) >= meta.MaxSections {
		a.mu.Unlock()
		return invalid("more than %d sections", meta.MaxSections)
	}
	i, _ := slices.BinarySearchFunc(a.md.Sections, name, func(x meta.Section, n string) int { return cmpString(x.Name, n) })
	next := a.md
	next.Sections = slices.Insert(slices.Clone(a.md.Sections), i, ms)
	// A record past MaxRecord would not encode: kept, it would fail this
	// and every later publication, and no peer could read the record.
	if n := next.Size(); n > maxRecord {
		a.mu.Unlock()
		return invalid("section %q: the record would be %d bytes, more than %d", name, n, maxRecord)
	}
	a.sections[name] = section{slice: s, key: key}
	a.md.Sections = next.Sections
	a.md.Version++
	md := cloneMeta(a.md)
	a.mu.Unlock()
	return a.republish(md, false)
}

// Withdraw stops offering the named section: the record is republished
// without it, and every peer holding the previous record is told to drop
// it. Withdraw returns once they have (each closes its connection to this
// agent), or after Config.InvalidateWait, when it closes the connections
// of the peers that have not: after Withdraw no peer transfers with a key
// of the withdrawn section through this agent's side channel. (Peers
// that found the record in the store drop it on the store's event.)
func (a *Agent) Withdraw(name string) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return engine.ErrClosed
	}
	if _, ok := a.sections[name]; !ok {
		a.mu.Unlock()
		return fmt.Errorf("agent %s: withdraw %q: %w (%w)", a.cfg.Name, name, ErrNoSection, meta.ErrNotFound)
	}
	delete(a.sections, name)
	a.md.Sections = slices.DeleteFunc(slices.Clone(a.md.Sections), func(s meta.Section) bool { return s.Name == name })
	a.md.Version++
	md := cloneMeta(a.md)
	a.mu.Unlock()
	return a.republish(md, true)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// republish writes md to the store and tells the peers connected to this
// agent to drop the previous record; wait: until they did.
func (a *Agent) republish(md meta.Metadata, wait bool) error {
	var err error
	if a.store != nil {
		ctx, cancel := context.WithTimeout(a.ctx, a.cfg.StoreTimeout)
		err = a.store.Publish(ctx, md)
		cancel()
		if err != nil {
			if errors.Is(err, meta.ErrUnavailable) {
				a.retryStore(md.Version)
			}
			err = fmt.Errorf("agent %s: publish version %d: %w", a.cfg.Name, md.Version, err)
		}
	}
	a.mu.Lock()
	var ins []*inbound
	for in := range a.inbound {
		ins = append(ins, in)
	}
	a.mu.Unlock()
	deadline := time.Now().Add(a.cfg.InvalidateWait)
	msg := encodeInvalidate(md.Version)
	// Each peer on a goroutine of its own: one that takes no message
	// (its window full) must not hold back the others' invalidation
	// until the deadline (and get theirs closed, sent after it).
	ctx, cancel := context.WithDeadline(a.ctx, deadline)
	var sent sync.WaitGroup
	for _, in := range ins {
		sent.Add(1)
		go func() {
			defer sent.Done()
			if serr := sendMsg(in.ep, ctx, msg); serr != nil {
				in.ep.Close()
			}
		}()
	}
	sent.Wait()
	cancel()
	if !wait {
		return err
	}
	// One deadline for all (a timer's channel fires once: the peers
	// after the first one past it would be waited for until Close).
	wctx, wcancel := context.WithDeadline(a.ctx, deadline)
	defer wcancel()
	for i, in := range ins {
		select {
		case <-in.ep.Done():
		case <-wctx.Done():
			if a.ctx.Err() != nil {
				return errors.Join(err, engine.ErrClosed)
			}
			closeInbound(ins[i:])
			return err
		}
	}
	return err
}

// closeInbound closes the endpoints of ins at once, as Engine.Close
// closes its own: each Close may wait (up to 500 ms over TCP) for its
// peer to acknowledge what was sent, and one after another they would
// add up.
func closeInbound(ins []*inbound) {
	var closing sync.WaitGroup
	for _, in := range ins {
		closing.Go(func() { in.ep.Close() })
	}
	closing.Wait()
}

// retryStore publishes the agent's record until the store takes one of
// Version failed or later, or the agent closes: the record of a Publish
// or Withdraw the store failed (unreachable) is the agent's all the same
// (the section stays offered, or withdrawn), and the store must not keep
// the one before for good. One goroutine at a time, on the current
// record.
func (a *Agent) retryStore(failed uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.storeFailed = max(a.storeFailed, failed)
	if a.closed || a.storeRetrying {
		return
	}
	a.storeRetrying = true
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for d := 100 * time.Millisecond; ; d = min(2*d, 2*time.Second) {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-a.ctx.Done():
				t.Stop()
				return
			}
			md := a.Metadata()
			ctx, cancel := context.WithTimeout(a.ctx, a.cfg.StoreTimeout)
			err := a.store.Publish(ctx, md)
			cancel()
			a.mu.Lock()
			if (err == nil && a.storeFailed <= md.Version) || (err != nil && !errors.Is(err, meta.ErrUnavailable)) || a.closed {
				a.storeRetrying = false
				a.mu.Unlock()
				if err != nil && a.ctx.Err() == nil {
					a.log.Warn().Err(err).Uint64("version", md.Version).Msg("republishing the record failed")
				}
				return
			}
			a.mu.Unlock()
		}
	}()
}

// Close stops the agent: it closes its listeners, every endpoint it dialed
// or accepted (transfers in flight fail), and the store (withdrawing its
// record). The engine stays open. Idempotent.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	peers := make([]*Peer, 0, len(a.peers))
	for _, p := range a.peers {
		peers = append(peers, p)
	}
	ins := make([]*inbound, 0, len(a.inbound))
	for in := range a.inbound {
		ins = append(ins, in)
	}
	var stops []func()
	for _, stop := range a.watches {
		if stop != nil {
			stops = append(stops, stop)
		}
	}
	a.mu.Unlock()
	a.cancel()
	for _, stop := range stops {
		stop()
	}
	var errs []error
	for _, l := range a.listeners {
		errs = append(errs, l.Close())
	}
	var closing sync.WaitGroup // at once, as closeInbound
	for _, p := range peers {
		closing.Go(func() { p.invalidate(fmt.Errorf("%w: agent %s closed", engine.ErrClosed, a.cfg.Name)) })
	}
	closing.Go(func() { closeInbound(ins) })
	closing.Wait()
	a.wg.Wait()
	if a.store != nil {
		errs = append(errs, a.store.Close())
	}
	return errors.Join(errs...)
}

// listInboundLocked makes inList again (mu held).
func (a *Agent) listInboundLocked() {
	ins := make([]*inbound, 0, len(a.inbound))
	for in := range a.inbound {
		ins = append(ins, in)
	}
	a.inList.Store(&ins)
}

// acceptLoop takes the endpoints peers open on l and serves each.
func (a *Agent) acceptLoop(l *engine.Listener) {
	defer a.wg.Done()
	for {
		ep, err := l.Accept(a.ctx)
		if err != nil {
			if a.ctx.Err() == nil {
				a.log.Debug().Err(err).Msg("accept ended")
			}
			return
		}
		in := &inbound{ep: ep}
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			ep.Close()
			return
		}
		in.src = a.sourceOfLocked(ep)
		a.inbound[in] = struct{}{}
		a.listInboundLocked()
		a.mu.Unlock()
		a.stats.inbound.Add(1)
		a.wg.Add(1)
		go a.serve(in)
	}
}
