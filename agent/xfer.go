package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// Desc is one descriptor of a transfer: Len bytes between Local and the
// peer's section at Off. Len 0 means Local.Len(); otherwise it must equal
// it.
type Desc struct {
	Local   engine.Slice
	Section string
	Off     int
	Len     int
}

// XferOption adjusts one transfer.
type XferOption func(*xferConfig)

type xferConfig struct {
	notify    []byte
	hasNotify bool
	ops       []engine.OpOption
}

// WithNotify makes the transfer send msg (at most MaxNotify bytes) to the
// peer once every descriptor has completed successfully; the peer's Recv
// returns it only after the transfer's bytes are in its memory. If a
// descriptor failed, nothing is sent (Wait says why).
func WithNotify(msg []byte) XferOption {
	return func(c *xferConfig) { c.notify, c.hasNotify = msg, true }
}

// WithOpOptions passes options (engine.Timeout, engine.Deadline) to every
// Put or Get of the transfer.
func WithOpOptions(opts ...engine.OpOption) XferOption {
	return func(c *xferConfig) { c.ops = append(c.ops, opts...) }
}

// Xfer is one transfer of a list of descriptors: one completion and a
// status per descriptor. Like an engine.Future, the local memory of its
// descriptors is the engine's until Done is closed.
type Xfer struct {
	done  chan struct{}
	errs  []error
	err   error
	nDesc int
	// unsent: the Xfer failed before anything was submitted because the
	// peer could not be reached.
	unsent bool
}

// Done is closed when every descriptor has completed (and the
// notification, if any, was sent or failed).
func (x *Xfer) Done() <-chan struct{} { return x.done }

// Wait waits for the transfer (ctx bounds the wait, not the transfer) and
// returns its first error: a DescError naming the first descriptor that
// failed (wrapping a PeerError naming the peer, or engine.ErrInvalid for a
// descriptor that did not check), or the notification's failure.
func (x *Xfer) Wait(ctx context.Context) error {
	if ctx == nil {
		return invalid("nil context")
	}
	select {
	case <-x.done:
		return x.err
	default:
	}
	select {
	case <-x.done:
		return x.err
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}

// Err is Wait's result once the transfer is done, engine.ErrNotDone
// before.
func (x *Xfer) Err() error {
	select {
	case <-x.done:
		return x.err
	default:
		return engine.ErrNotDone
	}
}

// Status returns one entry per descriptor (nil: it succeeded) once the
// transfer is done, nil before.
func (x *Xfer) Status() []error {
	select {
	case <-x.done:
		if x.errs == nil {
			return make([]error, x.nDesc)
		}
		return x.errs
	default:
		return nil
	}
}

// failed returns an Xfer that failed as a whole (every descriptor with
// err).
func failedXfer(n int, err error) *Xfer {
	x := &Xfer{done: make(chan struct{}), nDesc: n, err: err, errs: make([]error, n)}
	for i := range x.errs {
		x.errs[i] = err
	}
	close(x.done)
	return x
}

// run is one element of an engine list: descriptors [first, first+n)
// coalesced.
type run struct {
	first, n int32
	local    *engine.Slice
	// key is the run's key (a prepared one); if nil, the run's key is
	// base's view of [roff, roff+bytes), made when its list is issued.
	key  *engine.RemoteKey
	base *engine.RemoteKey
	roff int
	// bytes is the run's length.
	bytes int
	err   error // its outcome, once its list is done
}

// Write copies each descriptor's local slice into the named peer's
// sections.
func (a *Agent) Write(ctx context.Context, peer string, descs []Desc, opts ...XferOption) *Xfer {
	return a.xfer(ctx, true, peer, descs, opts)
}

// Read copies the named peer's sections into each descriptor's local
// slice.
func (a *Agent) Read(ctx context.Context, peer string, descs []Desc, opts ...XferOption) *Xfer {
	return a.xfer(ctx, false, peer, descs, opts)
}

func (a *Agent) xfer(ctx context.Context, write bool, peer string, descs []Desc, opts []XferOption) *Xfer {
	var seq uint64 // the Forgets run when the peer was found
	for retried := false; ; retried = true {
		p, err := a.peer(ctx, peer, retried, &seq)
		if err != nil {
			return failedXfer(len(descs), err)
		}
		x := p.xfer(ctx, write, descs, opts)
		if x.unsent && !retried && p.Err() != nil && !errors.Is(p.Err(), ErrForgotten) {
			continue // the cached peer proved stale when dialed: resolve again
		}
		return x
	}
}

// Write copies the descriptors' local slices into the peer's sections.
func (p *Peer) Write(ctx context.Context, descs []Desc, opts ...XferOption) *Xfer {
	return p.xfer(ctx, true, descs, opts)
}

// Read copies the peer's sections into the descriptors' local slices.
func (p *Peer) Read(ctx context.Context, descs []Desc, opts ...XferOption) *Xfer {
	return p.xfer(ctx, false, descs, opts)
}

// check validates descriptor i against its section; it returns the
// section.
func (p *Peer) check(i int, d *Desc, psec **peerSection) error {
	sec := *psec
	if sec == nil || d.Section != sec.s.Name {
		ps, ok := p.keys[d.Section]
		if !ok {
			return &DescError{Index: i, Err: p.wrap(fmt.Errorf("%w: %q (%w)", ErrNoSection, d.Section, meta.ErrNotFound))}
		}
		sec, *psec = ps, ps
	}
	if sec.err != nil {
		return &DescError{Index: i, Err: p.wrap(sec.err)}
	}
	if err := d.Local.Err(); err != nil {
		return &DescError{Index: i, Err: err}
	}
	if d.Local.Buffer() == nil {
		return &DescError{Index: i, Err: invalid("no local slice")}
	}
	n := d.Len
	if n == 0 {
		n = d.Local.Len()
	}
	switch {
	case n != d.Local.Len():
		return &DescError{Index: i, Err: invalid("length %d, local slice of %d bytes", d.Len, d.Local.Len())}
	case n <= 0:
		return &DescError{Index: i, Err: invalid("empty descriptor")}
	case d.Off < 0 || uint64(d.Off) > sec.s.Len || uint64(n) > sec.s.Len-uint64(d.Off):
		return &DescError{Index: i, Err: invalid("[%d, +%d) outside section %q of %d bytes", d.Off, n, d.Section, sec.s.Len)}
	}
	return nil
}

func (p *Peer) xfer(ctx context.Context, write bool, descs []Desc, opts []XferOption) *Xfer {
	a := p.a
	var cfg xferConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.hasNotify && len(cfg.notify) > MaxNotify {
		return a.failed(len(descs), invalid("notification of %d bytes, over %d", len(cfg.notify), MaxNotify))
	}
	if len(descs) == 0 && !cfg.hasNotify {
		return a.failed(0, invalid("no descriptors"))
	}
	// Check every descriptor and find the runs of neighbours: each run
	// a view of its section's key, made when its list is issued (no key
	// copied per descriptor, nothing allocated per descriptor).
	rb := a.runBufs(len(descs))
	runs := rb.runs
	var sec *peerSection
	for i := range descs {
		d := &descs[i]
		if err := p.check(i, d, &sec); err != nil {
			rb.runs = runs
			a.putRunBufs(rb)
			x := failedXfer(len(descs), err)
			for j := range x.errs {
				if j != i {
					x.errs[j] = ErrNotSubmitted
				}
			}
			a.stats.countErr(err)
			return x
		}
		n, loff := d.Local.Len(), d.Local.Offset()
		if k := len(runs) - 1; k >= 0 {
			r := &runs[k]
			prev := &descs[r.first]
			if prev.Local.Buffer() == d.Local.Buffer() && r.base == &sec.key &&
				prev.Local.Offset()+r.bytes == loff && r.roff+r.bytes == d.Off {
				r.n++
				r.bytes += n
				continue
			}
		}
		runs = append(runs, run{first: int32(i), n: 1, base: &sec.key, roff: d.Off, bytes: n})
	}
	// The runs own their slices (descs is the caller's).
	rb.runs = runs
	locals := rb.locals[:len(runs)]
	for k := range runs {
		r := &runs[k]
		if r.n == 1 {
			locals[k] = descs[r.first].Local
		} else {
			l := &descs[r.first].Local
			locals[k] = l.Buffer().Slice(l.Offset(), r.bytes)
		}
		r.local = &locals[k]
	}
	return p.post(ctx, write, len(descs), runs, &cfg, func([]run) { a.putRunBufs(rb) }, nil)
}

// runBufs is a transfer's runs and the local slices they own, reused.
type runBufs struct {
	runs   []run
	locals []engine.Slice
}

// runBufs returns empty runs and locals with room for n.
func (a *Agent) runBufs(n int) *runBufs {
	if rb, _ := a.runPool.Get().(*runBufs); rb != nil && cap(rb.runs) >= n {
		return rb
	}
	return &runBufs{runs: make([]run, 0, n), locals: make([]engine.Slice, n)}
}

// putRunBufs takes them back, the runs used (rb.runs) and their slices
// cleared (they point at buffers and keys; the rest was cleared when last
// used).
func (a *Agent) putRunBufs(rb *runBufs) {
	clear(rb.locals[:len(rb.runs)])
	clear(rb.runs)
	rb.runs = rb.runs[:0]
	a.runPool.Put(rb)
}

func (a *Agent) failed(n int, err error) *Xfer {
	a.stats.countErr(err)
	return failedXfer(n, err)
}

// post issues the runs and returns their Xfer. The runs go to the engine
// as lists (Endpoint.PutList, GetList: one operation each, which a
// transport may move as one, e.g. one copy over a unix socket), each
// holding slots of the peer's window while in flight: a short transfer's
// list is issued here when the window has room (the first byte moves
// before Write returns), the rest by the Xfer's goroutine as earlier
// lists complete.
//
// If rest is not nil, runs holds the first runs only: rest appends the
// others, once the first list was issued.
func (p *Peer) post(ctx context.Context, write bool, nDesc int, runs []run, cfg *xferConfig, recycle func([]run), rest func([]run) []run) *Xfer {
	a := p.a
	ep, err := p.conn(ctx)
	if err != nil {
		if recycle != nil {
			recycle(runs)
		}
		x := a.failed(nDesc, err)
		x.unsent = true
		return x
	}
	w := &xferWork{p: p, ep: ep, ctx: ctx, write: write, runs: runs, ops: cfg.ops, recycle: recycle,
		x: &Xfer{done: make(chan struct{}), nDesc: nDesc}}
	if cfg.hasNotify {
		w.notify = encodeNotify(cfg.notify)
	}
	// The first runs (syncRuns, more for a Write or Read: firstRuns) are
	// a list of their own, issued here when the window has room: the
	// first byte moves before Write returns, however long the transfer
	// (and before the rest is planned, with rest). The rest go as lists
	// of up to maxListRuns runs (one operation each, which a transport
	// may move as one: one copy split over cores over a unix socket) from
	// the Xfer's goroutine, each holding at most the window less the
	// first list's slots (so that it need not wait for the first list to
	// end). Without rest, and when the first list holds overlapMin bytes
	// or more, that goroutine starts before the first list is issued, so
	// that it issues the second while the first moves (over a unix
	// socket, while the caller copies it); for less, the wakeup of a
	// goroutine on the other core would cost more than it hides.
	first, firstB := min(len(runs), syncRuns), 0
	if rest == nil {
		first, firstB = firstRuns(runs)
	}
	slots := int64(max(1, a.cfg.MaxInFlight-syncRuns))
	split := func() {
		for i := first; i < len(runs); i += maxListRuns {
			end := min(i+maxListRuns, len(runs))
			w.lists = append(w.lists, runList{start: i, end: end, slots: min(int64(end-i), slots)})
		}
	}
	if first > 0 {
		w.lists = append(make([]runList, 0, 2), runList{start: 0, end: first, slots: int64(min(first, syncRuns, a.cfg.MaxInFlight))})
		if p.window.TryAcquire(w.lists[0].slots) {
			w.issued = 1
			if rest == nil && len(runs) > first && firstB >= overlapMin {
				split()
				w.countStats(nDesc)
				w.firstIssued = make(chan struct{})
				go w.complete()
				w.issue(&w.lists[0])
				close(w.firstIssued)
				return w.x
			}
			w.issue(&w.lists[0])
		}
	}
	if rest != nil {
		runs = rest(runs)
		w.runs = runs
	}
	split()
	w.countStats(nDesc)
	if w.issued == 1 && len(w.lists) == 1 && w.lists[0].fut.IsDone() {
		// Everything completed in the caller (copies into a peer's
		// mapped memory): finish here, without a goroutine's wakeup
		// before the notification.
		p.window.Release(w.lists[0].slots)
		w.finish()
		return w.x
	}
	go w.complete()
	return w.x
}

const (
	// syncRuns: the first this many runs of a transfer are issued by
	// the caller when the window has room; the rest by the Xfer's
	// goroutine.
	syncRuns = 8
	// maxListRuns bounds the runs of one engine list.
	maxListRuns = 1024
	// firstBytes bounds the bytes of the first list beyond its syncRuns
	// runs.
	firstBytes = 8 << 20
	// overlapMin is the first list's size from which the Xfer's
	// goroutine starts before the first list is issued.
	overlapMin = 1 << 20
)

// firstRuns is how many runs of a Write or Read post issues itself, and
// their bytes: syncRuns, and more while they hold at most an eighth of
// the transfer's bytes and firstBytes. Where the caller's list is copied
// on the caller's goroutine (into a peer's mapped memory), that copy then
// hides the planning of the rest on the Xfer's goroutine: the rest's
// checks and views are not a pause between the first copy and the
// others.
func firstRuns(runs []run) (n, bytes int) {
	total := 0
	for i := range runs {
		total += runs[i].bytes
	}
	want := min(total/8, firstBytes)
	for n < len(runs) && n < maxListRuns && (n < syncRuns || bytes+runs[n].bytes <= want) {
		bytes += runs[n].bytes
		n++
	}
	return n, bytes
}

// countStats counts the transfer as started, and its bytes.
func (w *xferWork) countStats(nDesc int) {
	for i := range w.runs {
		w.bytes += uint64(w.runs[i].bytes)
	}
	st := &w.p.a.stats
	if w.write {
		st.writes.Add(1)
		st.puts.Add(uint64(len(w.runs)))
	} else {
		st.reads.Add(1)
		st.gets.Add(uint64(len(w.runs)))
	}
	st.descs.Add(uint64(nDesc))
	st.inFlight.Add(1)
}

// xferWork is an Xfer in progress.
type xferWork struct {
	p      *Peer
	ep     *engine.Endpoint
	ctx    context.Context
	write  bool
	runs   []run
	lists  []runList
	ops    []engine.OpOption
	notify []byte
	x      *Xfer
	// recycle, if set, takes the runs back once done.
	recycle func([]run)
	issued  int    // lists post issued (each holding its slots of the window)
	bytes   uint64 // in all the runs
	// firstIssued, if not nil, is closed once post has issued the first
	// list (while the Xfer's goroutine issues the others).
	firstIssued chan struct{}
}

// runList is runs [start, end) issued as one engine list, holding slots
// of the peer's window (one per run, at most the whole window) until it
// completes.
type runList struct {
	start, end int
	slots      int64
	fut        *engine.Future
	// idx[k] is the run of the list's element k (nil: start+k).
	idx []int32
}

// issue issues list l; the caller took its slots of the window. A run
// whose key did not derive fails alone (its error stands in the list's
// place for it).
func (w *xferWork) issue(l *runList) {
	n := l.end - l.start
	sc := w.p.a.listScratch(n)
	locals, keys := sc.locals, sc.keys
	for j := l.start; j < l.end; j++ {
		r := &w.runs[j]
		keys = keys[:len(keys)+1]
		k := &keys[len(keys)-1]
		if r.key != nil {
			*k = *r.key
		} else {
			*k = r.base.View(r.roff, r.bytes)
		}
		if err := k.Err(); err != nil {
			keys = keys[:len(keys)-1]
			if l.idx == nil {
				l.idx = make([]int32, 0, n)
				for k := l.start; k < j; k++ {
					l.idx = append(l.idx, int32(k))
				}
			}
			r.err = err
			continue
		}
		if l.idx != nil {
			l.idx = append(l.idx, int32(j))
		}
		locals = append(locals, *r.local)
	}
	switch {
	case len(locals) == 0:
		l.fut = engine.ResolvedFuture(nil)
	case len(locals) == 1 && w.write: // a lone run: the engine's Put is lighter than a list
		l.fut = w.ep.Put(w.ctx, locals[0], keys[0], w.ops...)
	case len(locals) == 1:
		l.fut = w.ep.Get(w.ctx, locals[0], keys[0], w.ops...)
	case w.write:
		l.fut = w.ep.PutList(w.ctx, locals, keys, w.ops...)
	default:
		l.fut = w.ep.GetList(w.ctx, locals, keys, w.ops...)
	}
	// The engine keeps neither slice once PutList or GetList returns.
	sc.locals, sc.keys = locals, keys
	w.p.a.putListScratch(sc)
}

// scratch is the slices an issue hands the engine, reused.
type scratch struct {
	locals []engine.Slice
	keys   []engine.RemoteKey
}

// listScratch returns empty slices with room for n elements.
func (a *Agent) listScratch(n int) *scratch {
	if sc, _ := a.scratch.Get().(*scratch); sc != nil && cap(sc.keys) >= n && cap(sc.locals) >= n {
		return sc
	}
	return &scratch{locals: make([]engine.Slice, 0, max(n, syncRuns)), keys: make([]engine.RemoteKey, 0, max(n, syncRuns))}
}

// putListScratch takes slices back. They are not cleared (issue sets
// every element it uses): what they point at stays reachable only until
// they are reused or a GC empties the pool (see engine's putListReqs).
func (a *Agent) putListScratch(sc *scratch) {
	sc.locals, sc.keys = sc.locals[:0], sc.keys[:0]
	a.scratch.Put(sc)
}

// complete issues the lists left, each within its slots of the peer's
// window: when there is no room, it waits for its own oldest list in
// flight to give its slots back, or, with none, for other Xfers' lists.
// Then it waits for all and finishes (the notification last).
func (w *xferWork) complete() {
	window := w.p.window
	oldest, end := 0, len(w.lists)
	for i := w.issued; i < end; i++ {
		l := &w.lists[i]
		for !window.TryAcquire(l.slots) {
			if oldest < i {
				<-w.listDone(oldest)
				window.Release(w.lists[oldest].slots)
				oldest++
				continue
			}
			if err := window.Acquire(w.ctx, l.slots); err != nil {
				err = ctxErr(w.ctx)
				for j := i; j < len(w.lists); j++ {
					w.lists[j].fut = engine.ResolvedFuture(err)
				}
				end = i
			}
			break
		}
		if i < end {
			w.issue(l)
		}
	}
	for ; oldest < end; oldest++ {
		<-w.listDone(oldest)
		window.Release(w.lists[oldest].slots)
	}
	w.finish()
}

// listDone is list i's future's Done, once it was issued.
func (w *xferWork) listDone(i int) <-chan struct{} {
	if i == 0 && w.firstIssued != nil {
		<-w.firstIssued
	}
	return w.lists[i].fut.Done()
}

// runErrs sets each run's outcome from its list's future (done).
func (w *xferWork) runErrs() (allOK bool) {
	allOK = true
	for li := range w.lists {
		l := &w.lists[li]
		if l.idx != nil {
			allOK = false // a run failed when its list was issued
		}
		if l.fut.Err() == nil {
			continue // every element succeeded: its runs' errors stay nil
		}
		allOK = false
		errs := l.fut.Errs()
		at := func(k int) int {
			if l.idx == nil {
				return l.start + k
			}
			return int(l.idx[k])
		}
		n := l.end - l.start
		if l.idx != nil {
			n = len(l.idx)
		}
		for k := range n {
			r := &w.runs[at(k)]
			switch {
			case k < len(errs):
				r.err = errs[k]
			case errs == nil:
				r.err = l.fut.Err()
			}
		}
	}
	return allOK
}

// finish sets the statuses and sends the notification; every list has
// completed and given its window slots back.
func (w *xferWork) finish() {
	p, a, x := w.p, w.p.a, w.x
	allOK := w.runErrs()
	// A peer dropped while a run was in flight fails it, even if the
	// engine completed it (a copy into a mapping of the dead peer's
	// memory, say).
	var dead error
	select {
	case <-p.dead:
		dead = p.Err()
	default:
	}
	bytes := w.bytes
	if !allOK || dead != nil {
		bytes = w.runStatus(dead)
	}
	a.stats.bytes.Add(bytes)
	for _, e := range x.errs {
		if e != nil {
			x.err = e
			break
		}
	}
	if w.notify != nil {
		if x.err != nil {
			x.err = fmt.Errorf("%w (the notification was not sent)", x.err)
		} else if err := p.send(w.ctx, w.ep, w.notify); err != nil {
			x.err = fmt.Errorf("agent: notification: %w", err)
			a.stats.countErr(err)
		}
	}
	a.stats.inFlight.Add(-1) // before Done: a Stats read after Wait sees it
	close(x.done)
	if w.recycle != nil { // nothing reads the runs after Done
		w.recycle(w.runs)
		w.runs = nil
	}
}

// runStatus sets the status of each descriptor from its run's outcome
// (every run's that succeeded fails with dead, if not nil) and returns
// the bytes of the runs that succeeded.
func (w *xferWork) runStatus(dead error) (bytes uint64) {
	p, a, x := w.p, w.p.a, w.x
	for i := range w.runs {
		r := &w.runs[i]
		err := r.err
		if err == nil {
			err = dead
		}
		if err == nil {
			bytes += uint64(r.bytes)
			continue
		}
		err = p.wrap(err)
		if x.errs == nil {
			x.errs = make([]error, x.nDesc)
		}
		for j := r.first; j < r.first+r.n; j++ {
			x.errs[j] = &DescError{Index: int(j), Err: err}
			a.stats.countErr(err)
		}
	}
	return bytes
}
