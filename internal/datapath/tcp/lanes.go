package tcp

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// Lanes: a dialed TCP endpoint opens Config.TCPLanes connections to its
// peer; transfers of laneMin bytes or more are cut into one part per
// lane, each moved as its own request on its own connection, so that the
// kernel's copies of the parts run on several cores and the request/reply
// gap of one part is covered by the others. A smaller transfer goes
// whole to the connection with the fewest requests in progress, the
// first one on a tie: a lone request takes the first connection, many
// at once spread over them all. A descriptor list (StartList, list.go)
// is cut into one group per lane. The peer serves lanes like any endpoint but does not
// return them from Accept; a lane that fails fails its endpoint (but one
// failing while the endpoint opens its lanes, which is dropped), and the
// endpoint its lanes.

// laneMin is the smallest transfer split over the lanes.
const laneMin = 4 << 20

// LaneDialer is what the engine offers (on its datapath.Env) for lanes.
type LaneDialer interface {
	// DialLane opens an extra connection to the peer of c, the way c was
	// dialed, whose Hello carries wire.CapLane (the peer serves it but
	// does not return it from Accept), and returns its control channel.
	// The engine makes the lane's path with Transport.Connect, passing
	// ctx (or a context derived from it) on. Closing the lane is closing
	// the returned Ctrl (io.Closer), else failing it.
	DialLane(ctx context.Context, c datapath.Ctrl) (datapath.Ctrl, error)
}

// laneKey keys the laneSlot in the context of a DialLane: Connect finds
// it there, and knows the path it makes is a lane.
type laneKey struct{}

type laneSlot struct {
	parent *path
	p      *path // the lane's path, set by Connect
}

type lane struct {
	c datapath.Ctrl
	p *path
}

// openLanes dials the extra connections of p. A lane that cannot be
// opened is logged and done without: the endpoint works on fewer. So is
// one that fails before p's endpoint started (p is not in use yet: no
// transfer is on the lane), which is closed and dropped then (Started);
// a lane that fails later fails p (laneFailed).
func (p *path) openLanes(ctx context.Context) {
	log := p.env.Logger()
	d, ok := p.env.(LaneDialer)
	if !ok {
		log.Warn().Str("peer", p.c.Name()).Msg("extra TCP lanes not opened: the engine cannot dial them")
		return
	}
	p.mu.Lock()
	p.opening = true
	p.mu.Unlock()
	for i := 1; i < p.env.Config().TCPLanes; i++ {
		slot := &laneSlot{parent: p}
		lc, err := d.DialLane(context.WithValue(ctx, laneKey{}, slot), p.c)
		if err == nil && slot.p == nil {
			closeCtrl(lc)
			err = gxerr.New(gxerr.Invalid, "the lane's path was not made by this transport", nil)
		}
		if err != nil {
			log.Warn().Err(err).Str("peer", p.c.Name()).Msg("extra TCP lane not opened")
			break
		}
		p.mu.Lock()
		p.lanes = append(p.lanes, lane{c: lc, p: slot.p})
		ps := make([]*path, len(p.lanes))
		for i, l := range p.lanes {
			ps[i] = l.p
		}
		p.laneSnap.Store(&ps)
		failed := p.failed
		p.mu.Unlock()
		if failed != nil {
			lc.Fail(failed)
		}
	}
}

// Started is p's endpoint started (datapath.Starter).
func (p *path) Started() { p.dropFailedLanes() }

// dropFailedLanes ends p's opening (Started): the lanes that failed
// since openLanes began are taken out of p and closed; from now on a
// lane that fails fails p.
func (p *path) dropFailedLanes() {
	p.mu.Lock()
	p.opening = false
	var kept, dropped []lane
	for _, l := range p.lanes {
		if l.p.dropped {
			dropped = append(dropped, l)
		} else {
			kept = append(kept, l)
		}
	}
	if len(dropped) > 0 {
		p.lanes = kept
		ps := make([]*path, len(kept))
		for i, l := range kept {
			ps[i] = l.p
		}
		p.laneSnap.Store(&ps)
	}
	p.mu.Unlock()
	for _, l := range dropped {
		closeCtrl(l.c) // not under p.mu: closing the lane fails it (laneFailed)
	}
}

// laneFailed is lane l of p failing with err: it reports whether p
// fails with it. Not before p's endpoint started (Started drops l
// then): p is not in use yet, and works on fewer connections.
func (p *path) laneFailed(l *path, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.opening {
		return true
	}
	l.dropped = true
	log := p.env.Logger()
	log.Warn().Err(err).Str("peer", p.c.Name()).Msg("extra TCP lane failed before its endpoint started: done without")
	return false
}

// laneList is the paths of p's lanes.
func (p *path) laneList() []*path {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := make([]*path, len(p.lanes))
	for i, l := range p.lanes {
		ps[i] = l.p
	}
	return ps
}

func (p *path) laneCtrls() []datapath.Ctrl {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := make([]datapath.Ctrl, len(p.lanes))
	for i, l := range p.lanes {
		cs[i] = l.c
	}
	return cs
}

// closeLanes closes the lanes of an endpoint that ended with err, all at
// once (closing one waits, a little, for a peer that does not read its
// Bye). One that failed (it was not closed) fails them with err first:
// closing a lane fails it with gxerr.Closed, which its transfers would
// end with when the goroutine of Failed (failing the lanes with err) has
// not run yet. Closed runs on the reader's way out, not inside the
// endpoint's Fail: failing a lane here (as closing it already did) waits
// for no endpoint's failure.
func (p *path) closeLanes(err error) {
	var wg sync.WaitGroup
	for _, c := range p.laneCtrls() {
		wg.Go(func() {
			if !errors.Is(err, gxerr.Closed) {
				c.Fail(err)
			}
			closeCtrl(c)
		})
	}
	wg.Wait()
}

func closeCtrl(c datapath.Ctrl) {
	if cl, ok := c.(io.Closer); ok {
		_ = cl.Close()
		return
	}
	c.Fail(gxerr.New(gxerr.Closed, "endpoint closed", nil))
}

// pick is the connection a transfer too small to split goes to: the
// one with the fewest requests in progress, p on a tie.
func (p *path) pick() *path {
	best, bn := p, p.outstanding.Load()
	ls := p.laneSnap.Load()
	if bn == 0 || ls == nil {
		return p
	}
	for _, l := range *ls {
		if n := l.outstanding.Load(); n < bn {
			best, bn = l, n
			if n == 0 {
				break
			}
		}
	}
	return best
}

// startLanes splits a Put or Get over the endpoint and its lanes.
func (p *path) startLanes(ctx context.Context, r datapath.Req, c datapath.Completer) {
	lanes := append([]*path{p}, p.laneList()...)
	n := r.Local.Len
	parts := uint64(len(lanes))
	m := &multi{c: c}
	m.left.Store(int32(parts))
	for i, l := range lanes {
		off, cnt := split(n, parts, uint64(i))
		if cnt == 0 {
			m.Complete(0, nil)
			continue
		}
		sub, err := r.Key.Slice(off, cnt)
		if err != nil { // cannot happen: the view was checked
			m.Complete(0, gxerr.New(gxerr.Invalid, "remote key range", err))
			continue
		}
		part := r
		part.Local, part.Key, part.MapKey = r.Local.Sub(off, cnt), sub, nil
		l.start(ctx, part, m)
	}
}

// split is part i of n bytes cut into parts: parts are 4 KiB-aligned and
// differ by at most one page (the last ones may be shorter, or empty).
func split(n, parts, i uint64) (off, cnt uint64) {
	per := (n/parts + 4095) &^ 4095
	off = i * per
	return off, min(per, n-min(off, n))
}

// multi completes c once every part completed, with the first error.
type multi struct {
	c    datapath.Completer
	left atomic.Int32
	mu   sync.Mutex
	err  error
}

func (m *multi) Complete(_ int, err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
	if m.left.Add(-1) == 0 {
		m.mu.Lock()
		err = m.err
		m.mu.Unlock()
		m.c.Complete(0, err)
	}
}

// CompleteAll resolves c early (the parts' Completes are then ignored
// by c).
func (m *multi) CompleteAll(err error) { m.c.CompleteAll(err) }

// Lanes returns the control channels of the lanes of a TCP path (none for
// another path): for tests and diagnostics.
func Lanes(p datapath.Path) []datapath.Ctrl {
	if tp, ok := p.(*path); ok {
		return tp.laneCtrls()
	}
	return nil
}
