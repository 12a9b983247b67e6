package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/engine"
)

// The KV-cache workload of gxfer perf -agent (like nixlbench's): an
// initiator writes requests of `blocks` blocks of `bsize` bytes into
// scattered slots of a target's section, each request followed by a
// notification; the target verifies a request's bytes when its
// notification arrives and acknowledges it (the acknowledgements bound the
// requests in flight to the window, so that a slot is rewritten only once
// the target has checked it).
//
// The section holds window*blocks slots; a random permutation of them,
// fixed per run by the seed, scatters the blocks: block i of request r is
// at slot perm[(r%window)*blocks+i]. The bytes of block i of request r are
// a pattern of (seed, r, i).

// kvParams are the parameters of one run, carried in every notification
// so that the target needs no configuration but its section.
type kvParams struct {
	seed          uint64
	window        int
	blocks, bsize int
}

func (p kvParams) slots() int      { return p.window * p.blocks }
func (p kvParams) sectionLen() int { return p.slots() * p.bsize }
func (p kvParams) requestLen() int { return p.blocks * p.bsize }
func (p kvParams) perm() []int     { return rand.New(rand.NewPCG(p.seed, 0x6b76)).Perm(p.slots()) }
func (p kvParams) slot(r uint64, i int, perm []int) int {
	return perm[int(r%uint64(p.window))*p.blocks+i]
}

// Message kinds of the workload.
const (
	kvHello = 1 // initiator -> target: its addresses, before its first request
	kvReq   = 2 // initiator -> target: request r's data is in place
	kvEnd   = 3 // initiator -> target: no more requests (r = how many)
	kvAck   = 4 // target -> initiator: request r checked (at = when notified)
	// kvWelcome: target -> initiator, the answer to its hello: where in
	// the section its requests go (base), so that initiators of one
	// target never share slots.
	kvWelcome = 5
	// kvReqUnfilled: as kvReq, from an initiator run with -verify=false:
	// its blocks carry no pattern, there is nothing to check.
	kvReqUnfilled = 6
	// kvFailed: target -> initiator, request r's bytes were not in place
	// when its notification arrived: the initiator's run ends there.
	kvFailed = 7
)

const kvMagic = 0x67784b56 // "gxKV"

// kvMsg is a workload notification.
type kvMsg struct {
	kind      uint8
	p         kvParams
	r         uint64
	at        int64  // unix ns: when the request was posted (req) or notified (ack)
	unix, tcp string // hello: where the target reaches the initiator
	// section and base: the request's blocks are in the target's
	// section (the target's own if "") from offset base on.
	section string
	base    uint64
}

func (m kvMsg) encode() []byte {
	b := binary.BigEndian.AppendUint32(nil, kvMagic)
	b = append(b, m.kind)
	b = binary.BigEndian.AppendUint64(b, m.p.seed)
	b = binary.BigEndian.AppendUint32(b, uint32(m.p.window))
	b = binary.BigEndian.AppendUint32(b, uint32(m.p.blocks))
	b = binary.BigEndian.AppendUint32(b, uint32(m.p.bsize))
	b = binary.BigEndian.AppendUint64(b, m.r)
	b = binary.BigEndian.AppendUint64(b, uint64(m.at))
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.unix)))
	b = append(b, m.unix...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.tcp)))
	b = append(b, m.tcp...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.section)))
	b = append(b, m.section...)
	return binary.BigEndian.AppendUint64(b, m.base)
}

var errKVMsg = errors.New("not a kvcache workload message")

func decodeKVMsg(b []byte) (kvMsg, error) {
	var m kvMsg
	const fixed = 4 + 1 + 8 + 4*3 + 8 + 8
	if len(b) < fixed+4 || binary.BigEndian.Uint32(b) != kvMagic {
		return m, errKVMsg
	}
	m.kind = b[4]
	m.p.seed = binary.BigEndian.Uint64(b[5:])
	m.p.window = int(binary.BigEndian.Uint32(b[13:]))
	m.p.blocks = int(binary.BigEndian.Uint32(b[17:]))
	m.p.bsize = int(binary.BigEndian.Uint32(b[21:]))
	m.r = binary.BigEndian.Uint64(b[25:])
	m.at = int64(binary.BigEndian.Uint64(b[33:]))
	rest := b[fixed:]
	str := func() (string, bool) {
		if len(rest) < 2 {
			return "", false
		}
		n := int(binary.BigEndian.Uint16(rest))
		if len(rest) < 2+n {
			return "", false
		}
		s := string(rest[2 : 2+n])
		rest = rest[2+n:]
		return s, true
	}
	var ok1, ok2, ok3 bool
	m.unix, ok1 = str()
	m.tcp, ok2 = str()
	m.section, ok3 = str()
	if len(rest) == 8 {
		m.base = binary.BigEndian.Uint64(rest)
		rest = rest[8:]
	}
	// The parameters are the peer's: within the limits checkAgent puts on
	// -O, -blocks and -block-size, so that slots and sectionLen neither
	// overflow nor make the receiver allocate without bound.
	if !ok1 || !ok2 || !ok3 || len(rest) != 0 || m.kind < kvHello || m.kind > kvFailed ||
		m.p.window < 1 || m.p.window > 1024 || m.p.blocks < 1 || m.p.blocks > 1<<16 || m.p.slots() > maxSlots ||
		m.p.bsize < 8 || m.p.bsize%8 != 0 || m.p.bsize > 64<<20 {
		return m, errKVMsg
	}
	return m, nil
}

// kvTarget serves the workload on a's section (already published as
// section) until `initiators` initiators ended (0: until ctx ends).
type kvTarget struct {
	a          *agent.Agent
	buf        *engine.Buffer // the section
	scratch    *engine.Buffer // host: a block read back from gaudi memory
	verify     bool
	initiators int
	// idle: a welcomed initiator with no request measured for this
	// long (-wait) has ended, its region freed (0: no bound).
	idle     time.Duration
	connect  bool // no store: reach initiators at the addresses of their hello
	sameHost bool // the initiator runs in this process (both roles): one clock
	out      io.Writer
	label    string // for the report
}

type kvTargetStats struct {
	reqs     uint64
	bytes    uint64
	first    time.Time
	last     time.Time
	lat      latencies // post -> notified
	verified uint64
	unfilled uint64 // requests of initiators run with -verify=false
	dropped  uint64 // bad notifications (dropBad)
	failed   uint64 // requests whose bytes were not in place (errNotInPlace)
	firstErr error  // the first of them
}

func (t *kvTarget) run(ctx context.Context) (err error) {
	var st kvTargetStats
	perms := map[uint64][]int{}
	ended := 0
	defer func() {
		if st.reqs > 0 || st.dropped > 0 {
			t.report(&st)
		}
	}()

	// Notifications and initiators going away, on one loop: Recv does not
	// end when a peer goes, and an initiator that went away (interrupted,
	// failed, killed) before its end has ended too.
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	notes, recvErr, gone := make(chan agent.Notification), make(chan error, 1), make(chan *agent.Peer)
	// Hellos are answered on goroutines of their own (reaching an
	// initiator may take a dial's timeout), in the slots of hellos.
	welcomed, hellos := make(chan helloResult), newHelloSlots()
	regionReqs := make(chan regionReq) // from the welcomes, once the initiator is reached
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			n, err := t.a.Recv(rctx)
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case notes <- n:
			case <-rctx.Done():
				// The loop waits for a word from this goroutine: the
				// ending, as from Recv (a notification in hand is dropped).
				recvErr <- rctx.Err()
				return
			}
		}
	}()
	active := map[string]bool{} // initiators welcomed and not ended
	forgets := newPeerForgets(t.a, active, hellos)
	// The section has a region per initiator (max(1, initiators)); each
	// active initiator writes one of its own, never shared.
	regions := max(1, t.initiators)
	stride := t.buf.Size() / regions
	used := make([]bool, regions)
	region := map[string]int{} // the region of each active initiator
	release := func(name string) {
		if r, ok := region[name]; ok {
			used[r] = false
			delete(region, name)
		}
	}
	watched := peerWatches{} // the peer each active initiator's watch is on
	var end func(name string, why string)
	watch := func(name string) {
		if !active[name] { // it ended before its welcome was reported
			return
		}
		p, err := t.a.Peer(rctx, name)
		if err != nil {
			// Gone already (its welcome went out a moment ago): no
			// watch would ever report it, and the target would wait
			// for it until -wait, or for good without one.
			if rctx.Err() == nil {
				end(name, fmt.Sprintf("gone before its end (%v)", err))
			}
			return
		}
		stopped, ok := watched.start(name, p)
		if !ok {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-p.Done():
				select {
				case gone <- p:
				case <-rctx.Done():
				case <-stopped:
				}
			case <-rctx.Done():
			case <-stopped:
			}
		}()
	}
	// An initiator counts (-initiators) once it ended having had a
	// request measured: one that ends or goes before any (a peer that
	// says hello and leaves) measured nothing, and the target waits on.
	measured := map[string]uint64{} // requests of each active initiator
	// A welcomed initiator that sends no request for t.idle holds its
	// region no longer: a peer that stays connected and silent would hold
	// it for good, and enough of them lock every initiator out.
	seen := map[string]time.Time{} // the last request (or welcome) of each active initiator
	// An initiator ended as idle is not welcomed again (that incarnation
	// of it: a restarted one is), or a peer repeating its hello would take
	// the region back at once, every time.
	inc, idled := map[string]uint64{}, newKeptRuns() // idled: at most maxFailedKept, the oldest forgotten first
	var idleTick <-chan time.Time
	if t.idle > 0 {
		tk := time.NewTicker(max(t.idle/4, time.Millisecond))
		defer tk.Stop()
		idleTick = tk.C
	}
	// Acknowledgements go out on a sender per initiator: one that does
	// not take them (its queue full, Notify blocks) must not hold the
	// loop, and with it every other initiator.
	type ackFail struct {
		name string
		q    chan []byte
		err  error
	}
	ackers, ackFailed := map[string]chan []byte{}, make(chan ackFail)
	// At the end the senders send what is queued (the last
	// initiator's kvFailed, say), each Notify within -wait, before
	// rctx ends.
	var ackWG sync.WaitGroup
	exiting := make(chan struct{})
	defer func() {
		close(exiting)
		for _, q := range ackers {
			close(q)
		}
		ackWG.Wait()
	}()
	acknowledge := func(name string, msg []byte) {
		q, ok := ackers[name]
		if !ok {
			q = make(chan []byte, maxAcksQueued)
			ackers[name] = q
			ackWG.Add(1)
			go func() {
				defer ackWG.Done()
				defer forgets.senderEnded(name, exiting)
				for msg := range q {
					nctx, cancel := rctx, context.CancelFunc(func() {})
					if t.idle > 0 {
						nctx, cancel = context.WithTimeout(rctx, t.idle)
					}
					err := t.a.Notify(nctx, name, msg)
					cancel()
					if err != nil {
						select {
						case ackFailed <- ackFail{name, q, err}:
						case <-exiting:
						}
						for range q { // until end, or the exit, closes it
						}
						return
					}
				}
			}()
		}
		select {
		case q <- msg:
		default:
			end(name, fmt.Sprintf("takes no acknowledgements (%d waiting for it): it has ended", maxAcksQueued))
		}
	}
	end = func(name string, why string) {
		if !active[name] {
			return
		}
		delete(active, name)
		release(name)
		if measured[name] == 0 {
			if why == "" {
				why = "ended"
			}
			why += ", before any request: nothing measured"
			if t.initiators > 0 {
				why += fmt.Sprintf(", not counted (-initiators %d: %d more to wait for)", t.initiators, t.initiators-ended)
			}
		} else {
			ended++
		}
		delete(measured, name)
		delete(seen, name)
		delete(inc, name)
		watched.end(name)
		forgets.endSender(ackers, name) // it goes once it sent what is queued
		if why != "" {
			fmt.Fprintf(t.out, "# initiator %s: %s\n", name, why)
		}
		forgets.forget(name)
	}

	for t.initiators == 0 || ended < t.initiators {
		var n agent.Notification
		select {
		case n = <-notes:
		case p := <-gone:
			if watched.current(p) {
				end(p.Name(), "gone before its end")
			}
			continue
		case name := <-forgets.sent:
			forgets.sentAll(name)
			continue
		case f := <-ackFailed:
			if ackers[f.name] != f.q {
				continue // an earlier run of that name
			}
			if errors.Is(f.err, context.DeadlineExceeded) {
				end(f.name, fmt.Sprintf("takes no acknowledgements within %v (-wait): it has ended", t.idle))
			} else {
				end(f.name, fmt.Sprintf("gone before its end (acknowledgement: %v)", f.err))
			}
			continue
		case now := <-idleTick:
			for _, name := range slices.Sorted(maps.Keys(active)) {
				if now.Sub(seen[name]) >= t.idle {
					idled.add(name, inc[name])
					end(name, fmt.Sprintf("idle for %v (-wait): its region freed", t.idle))
				}
			}
			continue
		case q := <-regionReqs:
			if idled.has(q.from, q.inc) {
				q.reply <- regionReply{err: fmt.Errorf("%w for %v (-wait) and is not welcomed again", errIdled, t.idle)}
				continue
			}
			r, ok := region[q.from] // a hello again: its region
			if !ok {
				if r = slices.Index(used, false); r < 0 {
					q.reply <- regionReply{err: fmt.Errorf("%w (%d: -initiators %d), by %s", errNoRegion, regions, t.initiators, strings.Join(slices.Sorted(maps.Keys(region)), ", "))}
					continue
				}
				used[r], region[q.from] = true, r
			}
			// Its requests come once it has its welcome, maybe before
			// the welcome's goroutine reports back.
			if !active[q.from] { // a hello again is no request: it keeps no region
				seen[q.from], inc[q.from] = time.Now(), q.inc
			}
			active[q.from] = true
			q.reply <- regionReply{base: uint64(r * stride)}
			continue
		case h := <-welcomed:
			hellos.done(h)
			forgets.strayed(h)
			if errors.Is(h.err, errNoRegion) || errors.Is(h.err, errIdled) {
				t.dropBad(&st, h.from, h.err)
				forgets.forget(h.from)
				continue
			}
			if h.err != nil {
				delete(active, h.from) // not an initiator of this run: it never had its welcome
				delete(measured, h.from)
				delete(seen, h.from)
				delete(inc, h.from)
				release(h.from)
				watched.end(h.from)
				forgets.endSender(ackers, h.from) // (a hello again of one welcomed)
				forgets.forget(h.from)
				fmt.Fprintf(t.out, "# initiator %s: %v\n", h.from, h.err)
				continue
			}
			fmt.Fprintf(t.out, "# initiator %s: welcomed, its requests at offset %d of the section\n", h.from, h.base)
			watch(h.from)
			forgets.forget(h.from) // (if it ended before its welcome was reported)
			continue
		case err := <-recvErr:
			if ctx.Err() != nil && t.initiators == 0 {
				return st.verifyErr()
			}
			return fmt.Errorf("target: receive: %w", err)
		}
		now := time.Now()
		m, err := decodeKVMsg(n.Msg)
		if err != nil {
			t.dropBad(&st, n.From, err)
			continue
		}
		switch m.kind {
		case kvHello:
			if m.p.sectionLen() > stride {
				t.dropBad(&st, n.From, fmt.Errorf("hello: it needs a section of %d bytes per initiator (%d), this one has %d: give the target the same -blocks, -block-size and -O",
					m.p.sectionLen(), regions, t.buf.Size()))
				continue
			}
			if err := hellos.take(n.From, n.Incarnation, n.Source()); err != nil {
				t.dropBad(&st, n.From, err)
				continue
			}
			wg.Add(1)
			go func(from string, inc uint64, source string, m kvMsg) {
				defer wg.Done()
				h := helloResult{from: from, inc: inc, source: source}
				wctx, cancel := rctx, context.CancelFunc(func() {})
				if t.idle > 0 {
					// Reaching it and its welcome within -wait: a peer
					// that never takes its welcome holds no slot for good.
					wctx, cancel = context.WithTimeout(rctx, t.idle)
				}
				h.base, h.err = t.welcome(wctx, &h, m, regionReqs)
				cancel()
				select {
				case welcomed <- h:
				case <-rctx.Done():
				}
			}(n.From, n.Incarnation, n.Source(), m)
			continue
		case kvEnd:
			end(n.From, "")
			continue
		case kvReq, kvReqUnfilled:
		default:
			t.dropBad(&st, n.From, fmt.Errorf("unexpected message kind %d", m.kind))
			continue
		}
		if !active[n.From] {
			t.dropBad(&st, n.From, fmt.Errorf("request %d from an initiator not welcomed (no hello, or ended)", m.r))
			continue
		}
		if end := m.base + uint64(m.p.sectionLen()); end > uint64(t.buf.Size()) || end < m.base {
			// Before the permutation: its size is the peer's to say.
			t.dropBad(&st, n.From, fmt.Errorf("request %d: blocks beyond the section (%d bytes from %d, section of %d)",
				m.r, m.p.sectionLen(), m.base, t.buf.Size()))
			continue
		}
		if st.reqs == 0 {
			st.first = now
		}
		st.reqs++
		measured[n.From]++
		seen[n.From] = now
		st.bytes += uint64(m.p.requestLen())
		st.last = now
		st.lat = append(st.lat, now.Sub(time.Unix(0, m.at)))
		if t.verify && m.kind == kvReqUnfilled {
			st.unfilled++
		} else if t.verify {
			perm, ok := perms[m.p.seed]
			if !ok {
				if len(perms) >= 64 { // a seed per initiator: bound what peers can make it keep
					clear(perms)
				}
				perm = m.p.perm()
				perms[m.p.seed] = perm
			}
			if err := t.check(ctx, m, perm); err != nil {
				if !errors.Is(err, errNotInPlace) {
					return fmt.Errorf("target: request %d from %s: %w", m.r, n.From, err)
				}
				// That initiator's run ends (it is told); the others go
				// on, and the target fails at its end.
				st.failed++
				if st.firstErr == nil {
					st.firstErr = fmt.Errorf("request %d from %s: %w", m.r, n.From, err)
				}
				fmt.Fprintf(t.out, "# initiator %s: request %d: %v (its run ends here)\n", n.From, m.r, err)
				acknowledge(n.From, kvMsg{kind: kvFailed, p: m.p, r: m.r}.encode())
				end(n.From, "")
				continue
			}
			st.verified++
		}
		acknowledge(n.From, kvMsg{kind: kvAck, p: m.p, r: m.r, at: now.UnixNano()}.encode())
	}
	return st.verifyErr()
}

// verifyErr is the target's error for the requests that failed
// verification, if any.
func (st *kvTargetStats) verifyErr() error {
	if st.failed == 0 {
		return nil
	}
	return fmt.Errorf("target: %d request(s) failed verification (the first: %w)", st.failed, st.firstErr)
}

// kvInitiator runs the workload against one target.
type kvInitiator struct {
	a        *agent.Agent
	peer     string
	section  string
	src      *engine.Buffer // window*blocks blocks
	staging  *engine.Buffer // host, one block: fills gaudi sources
	p        kvParams
	requests int
	base     uint64        // where its slots start in the section (the target's welcome)
	wait     time.Duration // for the welcome (-wait)
	foreign  atomic.Uint64 // notifications from other agents than the target, dropped
	verify   bool
	out      io.Writer
	label    string
}

func (in *kvInitiator) run(ctx context.Context) error {
	p := in.p
	perm := p.perm()
	// Recv does not end when a peer goes: the run waits for the welcome
	// and the acknowledgements under a ctx that ends with the target.
	tp, err := in.a.Peer(ctx, in.peer)
	if err != nil {
		return fmt.Errorf("initiator: %w", err)
	}
	ctx, gone := context.WithCancelCause(ctx)
	defer gone(nil)
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		select {
		case <-tp.Done():
			gone(fmt.Errorf("target %s is gone: %w", in.peer, tp.Err()))
		case <-watchDone:
		}
	}()
	md := in.a.Metadata()
	if err := in.a.Notify(ctx, in.peer, kvMsg{kind: kvHello, p: p, unix: md.Unix, tcp: md.TCP}.encode()); err != nil {
		return fmt.Errorf("initiator: hello to %s: %w", in.peer, err)
	}
	// The target may drop the hello (it says why in its output): the
	// welcome comes within -wait or not at all.
	// Notifications of other agents (anyone may notify an initiator:
	// it listens) are dropped and counted.
	wctx, cancelWait := context.WithTimeout(ctx, in.wait)
	var n agent.Notification
	for n.From != in.peer {
		if n, err = in.a.Recv(wctx); err != nil {
			cancelWait()
			if ctx.Err() == nil && wctx.Err() != nil {
				return fmt.Errorf("initiator: no welcome from %s within %v: it dropped the hello (its output says why: every region of its section in use, or not the same -blocks, -block-size and -O)", in.peer, in.wait)
			}
			return fmt.Errorf("initiator: welcome from %s: %w", in.peer, causeOf(ctx, err))
		}
		if n.From != in.peer {
			in.foreign.Add(1)
		}
	}
	cancelWait()
	welcome, err := decodeKVMsg(n.Msg)
	if err != nil || welcome.kind != kvWelcome {
		return fmt.Errorf("initiator: from %s, not a welcome: %w", n.From, errKVMsg)
	}
	in.base = welcome.base
	local := make([]engine.Slice, p.slots())
	remote := make([]agent.RemoteDesc, p.slots())
	for s := range local {
		local[s] = in.src.Slice(s*p.bsize, p.bsize)
		remote[s] = agent.RemoteDesc{Section: in.section, Off: int(in.base) + perm[s]*p.bsize, Len: p.bsize}
	}
	prep, err := in.a.Prepare(ctx, in.peer, local, remote)
	if err != nil {
		return fmt.Errorf("initiator: prepare %d descriptors for %s: %w", len(local), in.peer, err)
	}

	// Acknowledgements, on their own goroutine.
	type ack struct {
		r  uint64
		at time.Time
	}
	acks := make(chan ack, p.window)
	actx, stopAcks := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var ackErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(acks)
		for {
			n, err := in.a.Recv(actx)
			if err != nil {
				if actx.Err() == nil {
					ackErr = err
				}
				return
			}
			if n.From != in.peer {
				in.foreign.Add(1)
				continue
			}
			m, err := decodeKVMsg(n.Msg)
			if err == nil && m.kind == kvFailed {
				ackErr = fmt.Errorf("request %d failed verification at the target: its bytes were not in place when its notification arrived (the target's output says which)", m.r)
				return
			}
			if err != nil || m.kind != kvAck {
				ackErr = fmt.Errorf("from %s: %w", n.From, errKVMsg)
				return
			}
			acks <- ack{r: m.r, at: time.Unix(0, m.at)}
		}
	}()
	defer func() { stopAcks(); wg.Wait() }()

	idx := make([][]int, p.window)
	for w := range idx {
		idx[w] = make([]int, p.blocks)
		for i := range idx[w] {
			idx[w][i] = w*p.blocks + i
		}
	}
	var post, rtt latencies
	posted := make([]time.Time, p.window)
	xfers := make([]*agent.Xfer, p.window)
	// acked[w]: the last request posted in slot w was acknowledged.
	// Requests complete, so notify and are acknowledged, in any order:
	// slot w is reused only once its own request was checked.
	acked := make([]bool, p.window)
	reqOf := make([]int, p.window) // the request last posted in slot w
	inflight := 0
	// An acknowledgement comes within -wait, or the target stopped
	// acknowledging (stuck, or not a target of this workload).
	wait := func() error {
		tm := time.NewTimer(in.wait)
		defer tm.Stop()
		var a ack
		var ok bool
		select {
		case a, ok = <-acks:
		case <-tm.C:
			var open []int
			for w, x := range xfers {
				if x != nil && !acked[w] {
					open = append(open, reqOf[w])
				}
			}
			slices.Sort(open)
			return fmt.Errorf("initiator: no acknowledgement from %s within %v: requests %s not acknowledged", in.peer, in.wait, strings.Join(strings.Fields(strings.Trim(fmt.Sprint(open), "[]")), ", "))
		}
		if !ok {
			if ackErr == nil {
				ackErr = context.Cause(ctx)
			}
			return fmt.Errorf("initiator: acknowledgements from %s: %w", in.peer, ackErr)
		}
		w := int(a.r % uint64(p.window))
		if acked[w] || xfers[w] == nil {
			return fmt.Errorf("initiator: unexpected acknowledgement of request %d from %s", a.r, in.peer)
		}
		acked[w] = true
		inflight--
		rtt = append(rtt, time.Since(posted[w]))
		return nil
	}
	var start time.Time
	for r := range in.requests {
		w := r % p.window
		for xfers[w] != nil && !acked[w] {
			if err := wait(); err != nil {
				return err
			}
		}
		if x := xfers[w]; x != nil {
			// Its notification was acknowledged: done, or about to be.
			if err := x.Wait(ctx); err != nil {
				return fmt.Errorf("initiator: request %d: %w", r-p.window, err)
			}
		}
		if in.verify {
			if err := in.fill(ctx, uint64(r), w); err != nil {
				return err
			}
		}
		now := time.Now()
		if r == 0 {
			start = now
		}
		kind := uint8(kvReq)
		if !in.verify {
			kind = kvReqUnfilled
		}
		msg := kvMsg{kind: kind, p: p, r: uint64(r), at: now.UnixNano(), base: in.base}.encode()
		t0 := time.Now()
		x := prep.Write(ctx, idx[w], agent.WithNotify(msg))
		post = append(post, time.Since(t0))
		xfers[w], posted[w], acked[w], reqOf[w] = x, t0, false, r
		inflight++
	}
	for inflight > 0 {
		if err := wait(); err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	for _, x := range xfers {
		if x == nil {
			continue
		}
		if err := x.Wait(ctx); err != nil {
			return fmt.Errorf("initiator: %w", err)
		}
	}
	if err := in.a.Notify(ctx, in.peer, kvMsg{kind: kvEnd, p: p, r: uint64(in.requests)}.encode()); err != nil {
		return fmt.Errorf("initiator: end to %s: %w", in.peer, err)
	}
	in.report(elapsed, post, rtt)
	return nil
}

// causeOf is err, or why ctx ended if it did (the target went away).
func causeOf(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) && !errors.Is(c, context.DeadlineExceeded) {
		return c
	}
	return err
}

// fill writes the pattern of request r into the source blocks of window
// slot w.
func (in *kvInitiator) fill(ctx context.Context, r uint64, w int) error {
	p := in.p
	for i := range p.blocks {
		s := in.src.Slice((w*p.blocks+i)*p.bsize, p.bsize)
		if in.src.Location() == engine.Host {
			off := (w*p.blocks + i) * p.bsize
			fillBlock(in.src.Bytes()[off:off+p.bsize], p.seed, r, i)
			continue
		}
		fillBlock(in.staging.Bytes()[:p.bsize], p.seed, r, i)
		if err := in.a.Engine().CopySync(ctx, s, in.staging.Slice(0, p.bsize)); err != nil {
			return fmt.Errorf("initiator: fill block %d of request %d: %w", i, r, err)
		}
	}
	return nil
}
