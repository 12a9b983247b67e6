package agent

import (
	"context"
	"fmt"
	"runtime"
	"sync"

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

// run is one engine operation: descriptors [first, first+n) coalesced.
type run struct {
	first, n int32
	local    *engine.Slice
	key      *engine.RemoteKey // the prepared key, or one made for the run
	fut      *engine.Future
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
	for retried := false; ; retried = true {
		p, err := a.Peer(ctx, peer)
		if err != nil {
			return failedXfer(len(descs), err)
		}
		x := p.xfer(ctx, write, descs, opts)
		if x.unsent && !retried && p.Err() != nil {
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
func (p *Peer) check(i int, d *Desc, sec *peerSection, lastName *string) error {
	if d.Section != *lastName || sec.s.Name == "" {
		ps, ok := p.keys[d.Section]
		if !ok {
			return &DescError{Index: i, Err: p.wrap(fmt.Errorf("%w: %q", ErrNoSection, d.Section))}
		}
		*sec, *lastName = ps, d.Section
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
	// Check every descriptor and find the runs of neighbours.
	type span struct {
		first, n   int
		loff, roff int
		bytes      int
		key        *engine.RemoteKey // the section's
	}
	var (
		spans    = make([]span, 0, min(len(descs), 256))
		sec      peerSection
		lastName string
	)
	for i := range descs {
		d := &descs[i]
		if err := p.check(i, d, &sec, &lastName); err != nil {
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
		if k := len(spans) - 1; k >= 0 {
			c := &spans[k]
			prev := &descs[c.first]
			if prev.Local.Buffer() == d.Local.Buffer() && prev.Section == d.Section &&
				c.loff+c.bytes == loff && c.roff+c.bytes == d.Off {
				c.n++
				c.bytes += n
				continue
			}
		}
		ps := p.keys[d.Section]
		spans = append(spans, span{first: i, n: 1, loff: loff, roff: d.Off, bytes: n, key: &ps.key})
	}
	// The runs own their slices and keys (descs is the caller's).
	runs := make([]run, len(spans))
	locals := make([]engine.Slice, len(spans))
	keys := make([]engine.RemoteKey, len(spans))
	for k, c := range spans {
		if c.n == 1 {
			locals[k] = descs[c.first].Local
		} else {
			locals[k] = descs[c.first].Local.Buffer().Slice(c.loff, c.bytes)
		}
		keys[k] = c.key.Slice(c.roff, c.bytes)
		runs[k] = run{first: int32(c.first), n: int32(c.n), local: &locals[k], key: &keys[k]}
	}
	return p.post(ctx, write, len(descs), runs, &cfg, nil)
}

func (a *Agent) failed(n int, err error) *Xfer {
	a.stats.countErr(err)
	return failedXfer(n, err)
}

// post issues the runs and returns their Xfer: as many runs as the peer's
// window has room for are issued here, the rest by the Xfer's goroutine as
// earlier ones complete.
func (p *Peer) post(ctx context.Context, write bool, nDesc int, runs []run, cfg *xferConfig, recycle func([]run)) *Xfer {
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
	if write {
		a.stats.writes.Add(1)
		a.stats.puts.Add(uint64(len(runs)))
	} else {
		a.stats.reads.Add(1)
		a.stats.gets.Add(uint64(len(runs)))
	}
	a.stats.descs.Add(uint64(nDesc))
	a.stats.inFlight.Add(1)
	w := &xferWork{p: p, ep: ep, ctx: ctx, write: write, runs: runs, ops: cfg.ops, recycle: recycle,
		x: &Xfer{done: make(chan struct{}), nDesc: nDesc}}
	if cfg.hasNotify {
		w.notify = encodeNotify(cfg.notify)
	}
	if len(runs) <= syncRuns {
		// A short list: issue here what the window has room for (the
		// first byte moves before Write returns).
		for w.issued < len(runs) {
			select {
			case p.window <- struct{}{}:
				w.issue(w.issued)
				w.issued++
				continue
			default:
			}
			break
		}
	}
	if w.issued == len(runs) && w.allDone() {
		// Everything completed in the caller (copies into a peer's
		// mapped memory): finish here, without a goroutine's wakeup
		// before the notification.
		for range w.issued {
			<-p.window
		}
		w.finish()
		return w.x
	}
	go w.complete()
	return w.x
}

// allDone reports whether every run was issued and has completed.
func (w *xferWork) allDone() bool {
	for i := range w.runs {
		if !w.runs[i].fut.IsDone() {
			return false
		}
	}
	return true
}

const (
	// syncRuns: lists of up to this many runs are issued by the caller
	// as far as the window allows; longer ones by issuers.
	syncRuns = 8
	// parallelRuns: lists of this many runs or more are issued by
	// several goroutines (copies into a peer's mapped memory run in the
	// issuing goroutine: several use several cores).
	parallelRuns = 32
	maxIssuers   = 4
)

// xferWork is an Xfer in progress.
type xferWork struct {
	p      *Peer
	ep     *engine.Endpoint
	ctx    context.Context
	write  bool
	runs   []run
	ops    []engine.OpOption
	notify []byte
	x      *Xfer
	// recycle, if set, takes the runs back once done.
	recycle func([]run)
	issued  int // runs post issued (each holding a slot of the window)
}

// issue issues run i; the caller took a slot of the window for it.
func (w *xferWork) issue(i int) {
	r := &w.runs[i]
	switch err := r.key.Err(); {
	case err != nil:
		r.fut = engine.ResolvedFuture(err)
	case w.write:
		r.fut = w.ep.Put(w.ctx, *r.local, *r.key, w.ops...)
	default:
		r.fut = w.ep.Get(w.ctx, *r.local, *r.key, w.ops...)
	}
}

// issueEvery issues runs start, start+stride, ... (those before from were
// issued already), each within a slot of the peer's window: when there is
// no room, it waits for its own oldest run in flight to release one, or,
// with none, for other Xfers' runs. It returns once its runs are done.
func (w *xferWork) issueEvery(start, stride, from int) {
	window := w.p.window
	oldest, end := start, len(w.runs)
	for i := from; i < end; i += stride {
		for acquired := false; !acquired; {
			select {
			case window <- struct{}{}:
				acquired = true
				continue
			default:
			}
			if oldest < i {
				<-w.runs[oldest].fut.Done()
				<-window
				oldest += stride
				continue
			}
			select {
			case window <- struct{}{}:
				acquired = true
			case <-w.ctx.Done():
				err := ctxErr(w.ctx)
				for j := i; j < len(w.runs); j += stride {
					w.runs[j].fut = engine.ResolvedFuture(err)
				}
				end = i
				acquired = true
			}
		}
		if i < end {
			w.issue(i)
		}
	}
	for ; oldest < end; oldest += stride {
		<-w.runs[oldest].fut.Done()
		<-window
	}
}

// complete issues the runs left, waits for all, then sends the
// notification.
func (w *xferWork) complete() {
	if n := len(w.runs) - w.issued; n < parallelRuns {
		w.issueEvery(0, 1, w.issued)
	} else {
		k := min(runtime.GOMAXPROCS(0), maxIssuers)
		var wg sync.WaitGroup
		for id := range k {
			wg.Go(func() { w.issueEvery(id, k, id) })
		}
		wg.Wait()
	}
	w.finish()
}

// finish releases the window slots of the runs post issued, sets the
// statuses and sends the notification; every run has completed (or is
// waited for here).
func (w *xferWork) finish() {
	p, a, x := w.p, w.p.a, w.x
	defer a.stats.inFlight.Add(-1)
	var bytes uint64
	for i := range w.runs {
		r := &w.runs[i]
		err := r.fut.Err()
		if err == nil {
			// A peer dropped while the run was in flight fails it,
			// even if the engine completed it (a copy into a mapping
			// of the dead peer's memory, say).
			select {
			case <-p.dead:
				err = p.Err()
			default:
			}
		}
		if err == nil {
			bytes += uint64(r.local.Len())
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
	a.stats.bytes.Add(bytes)
	if w.recycle != nil {
		w.recycle(w.runs)
		w.runs = nil
	}
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
	close(x.done)
}
