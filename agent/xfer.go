package agent

import (
	"context"
	"fmt"

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
	first, n int
	local    engine.Slice
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
	p, err := a.Peer(ctx, peer)
	if err != nil {
		return failedXfer(len(descs), err)
	}
	return p.xfer(ctx, write, descs, opts)
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
	// Check every descriptor and coalesce neighbours.
	var (
		runs     = make([]run, 0, len(descs))
		keys     = make([]engine.RemoteKey, len(descs)) // one per run at most
		sec      peerSection
		lastName string
		cur      struct {
			buf        *engine.Buffer
			loff, roff int
			n          int
			sec        string
			key        engine.RemoteKey
		}
	)
	flush := func() {
		if len(runs) == 0 || cur.buf == nil {
			return
		}
		r := &runs[len(runs)-1]
		if r.n == 1 {
			r.local = descs[r.first].Local
		} else {
			r.local = cur.buf.Slice(cur.loff, cur.n)
		}
		keys[len(runs)-1] = cur.key.Slice(cur.roff, cur.n)
		r.key = &keys[len(runs)-1]
	}
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
		n := d.Local.Len()
		buf, loff := d.Local.Buffer(), d.Local.Offset()
		if cur.buf == buf && cur.sec == d.Section && cur.loff+cur.n == loff && cur.roff+cur.n == d.Off {
			cur.n += n
			runs[len(runs)-1].n++
			continue
		}
		flush()
		runs = append(runs, run{first: i, n: 1})
		cur.buf, cur.loff, cur.roff, cur.n, cur.sec, cur.key = buf, loff, d.Off, n, d.Section, sec.key
	}
	flush()
	return p.post(ctx, write, len(descs), runs, &cfg)
}

func (a *Agent) failed(n int, err error) *Xfer {
	a.stats.countErr(err)
	return failedXfer(n, err)
}

// post issues the runs and returns their Xfer.
func (p *Peer) post(ctx context.Context, write bool, nDesc int, runs []run, cfg *xferConfig) *Xfer {
	a := p.a
	ep, err := p.conn(ctx)
	if err != nil {
		return a.failed(nDesc, err)
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
	for i := range runs {
		r := &runs[i]
		if err := r.key.Err(); err != nil {
			r.fut = engine.ResolvedFuture(err)
		} else if write {
			r.fut = ep.Put(ctx, r.local, *r.key, cfg.ops...)
		} else {
			r.fut = ep.Get(ctx, r.local, *r.key, cfg.ops...)
		}
	}
	x := &Xfer{done: make(chan struct{}), nDesc: nDesc}
	var notify []byte
	if cfg.hasNotify {
		notify = encodeNotify(cfg.notify)
	}
	go p.complete(ctx, ep, x, runs, notify)
	return x
}

// complete waits for the runs of x, then sends its notification.
func (p *Peer) complete(ctx context.Context, ep *engine.Endpoint, x *Xfer, runs []run, notify []byte) {
	a := p.a
	defer a.stats.inFlight.Add(-1)
	var bytes uint64
	for i := range runs {
		r := &runs[i]
		<-r.fut.Done()
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
			x.errs[j] = &DescError{Index: j, Err: err}
			a.stats.countErr(err)
		}
	}
	a.stats.bytes.Add(bytes)
	for _, e := range x.errs {
		if e != nil {
			x.err = e
			break
		}
	}
	if notify != nil {
		if x.err != nil {
			x.err = fmt.Errorf("%w (the notification was not sent)", x.err)
		} else if err := p.send(ctx, ep, notify); err != nil {
			x.err = fmt.Errorf("agent: notification: %w", err)
			a.stats.countErr(err)
		}
	}
	close(x.done)
}
