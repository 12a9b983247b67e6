package engine

import (
	"context"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
)

// PutList copies each locals[i] into the peer's memory remotes[i] names
// (same lengths, pairwise), as one operation: one future with a status per
// element (Future.Errs, index i for element i). It is the list form of Put
// (see Put for ctx, options and completion): every element is checked as
// Put checks it, and its local buffer must not be freed already; if one
// fails the check nothing is started and the future resolves at once:
// Errs[i] names element i and wraps its error (ErrInvalid, ErrForeign,
// ErrFreed, the slice's own), the others say the list was not started.
// A local buffer freed while the list runs fails at most the elements
// in it, with ErrFreed; the others move (an element that held its buffer
// before the Free moves, and the memory lives until it ends).
//
// What a list gains over as many Puts depends on the transport. Over
// "unix", elements between host memory and the peer's mapped host memory
// are one copy on the caller's goroutine: its kernel is chosen by the
// list's total size and it is split over cores as one large copy is (a
// thousand scattered 64 KiB blocks move as fast as one 64 MiB put);
// elements involving Gaudi memory go as their Puts would. Transports
// without a list form run each element as its own Put. Elements are not
// ordered with one another; their destinations should not overlap.
//
// Each element counts as one Put in EndpointStats and Engine.Stats.
func (ep *Endpoint) PutList(ctx context.Context, locals []Slice, remotes []RemoteKey, opts ...OpOption) *Future {
	return ep.list(ctx, true, locals, remotes, opts)
}

// GetList copies the peer's memory each remotes[i] names into locals[i],
// as one operation (the list form of Get; see PutList). Over "tcp" the
// peer refuses a whole GetList (every element fails with the refusal)
// when the elements it refuses (stale or bad keys) add up to more than
// 1 MiB; smaller refusals fail only their own elements.
func (ep *Endpoint) GetList(ctx context.Context, locals []Slice, remotes []RemoteKey, opts ...OpOption) *Future {
	return ep.list(ctx, false, locals, remotes, opts)
}

func (ep *Endpoint) list(ctx context.Context, put bool, locals []Slice, remotes []RemoteKey, opts []OpOption) *Future {
	if ep.invalid() {
		return resolved(errNoEndpoint)
	}
	if err := ep.usable(ctx); err != nil {
		return resolved(err)
	}
	e := ep.e
	if !e.enterStart() {
		return resolved(ErrClosed)
	}
	defer e.exitStart()
	n := len(locals)
	if len(remotes) != n {
		return resolved(newErr(ErrInvalid, fmt.Sprintf("list of %d local slices and %d remote keys", n, len(remotes)), nil))
	}
	if n == 0 {
		return e.resolved
	}
	peer := &ep.ch.PeerHello().EngineID
	for i := range n {
		if err := ep.checkOwned(put, &locals[i], &remotes[i], peer); err != nil {
			return listInvalid(n, i, err)
		}
		// A freed buffer is a bad argument: refused before anything
		// moves, not left to the data path (which fails its elements
		// alone).
		if b := locals[i].buf; b.state.Load()&freedBit != 0 {
			return listInvalid(n, i, newErr(ErrFreed, fmt.Sprintf("buffer %d (%s)", b.id, b.loc), nil))
		}
	}
	var deadline time.Time
	if len(opts) > 0 || e.cfg.OpTimeout > 0 {
		deadline = e.opConfig(opts).deadline
	}
	reqs := e.listReqs(n)
	var total uint64
	for i := range n {
		r := &reqs[i]
		k := &remotes[i]
		r.Put, r.Local, r.Key, r.MapKey, r.Deadline = put, locals[i].mem(), k.k, k.reqMapKey(), deadline
		total += r.Local.Len
	}
	if put {
		ep.puts.Add(uint64(n))
	} else {
		ep.gets.Add(uint64(n))
	}
	ep.ch.MarkUsed() // in use (see Endpoint.start)
	o := newListOp(ep, reqs, total)
	o.setSpin(e.cfg.WaitSpin)
	if l, ok := ep.path.(datapath.Lister); ok {
		l.StartList(ctx, reqs, o)
		o.release()
		return &o.Future
	}
	// Start promises nothing about what a request points at once it
	// resolved: these requests are never reused.
	cs := make([]listElem, n)
	for i := range n {
		cs[i] = listElem{o: o, i: i}
		ep.path.Start(ctx, reqs[i], &cs[i])
	}
	return &o.Future
}

// listReqs returns n requests, reused when it can (a list's requests are a
// few hundred bytes per element): list sets every field of each.
func (e *Engine) listReqs(n int) []datapath.Req {
	if p, _ := e.reqPool.Get().(*[]datapath.Req); p != nil && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]datapath.Req, n)
}

// putListReqs takes back requests nothing reads any more. They are not
// cleared: list sets every field of each before use, and clearing a
// thousand requests (their cache lines evicted by the copy they
// described) would delay the list's completion. What they point at
// (buffers, keys) stays reachable only until they are reused or a GC
// empties the pool.
func (e *Engine) putListReqs(reqs []datapath.Req) {
	reqs = reqs[:0]
	e.reqPool.Put(&reqs)
}

// listInvalid is the future of a list that was not started because
// element idx failed its check.
func listInvalid(n, idx int, err error) *Future {
	f := newBatchFuture(n)
	f.complete(idx, fmt.Errorf("gxfer: list element %d: %w", idx, err))
	f.completeAll(fmt.Errorf("gxfer: list not started: element %d failed its check: %w", idx, err))
	return f
}

// listOp is the future of a PutList or GetList and the completer its data
// path resolves: each element is counted (once) as a Put or Get before
// the future sees its completion.
type listOp struct {
	Future
	ep    *Endpoint
	reqs  []datapath.Req
	n     int    // elements
	bytes uint64 // in all of them
	// done has bit i%64 of word i/64 set once element i was counted.
	done  []atomic.Uint64
	left  atomic.Int64  // elements not counted yet
	start time.Duration // monotonic, since clockBase (opClock)
	// holds: the call that started the list (until StartList returned;
	// for ever with a path that is not a datapath.Lister) and its
	// elements (until the last was counted). The last to let go gives
	// reqs back: the path reads them no more (datapath.Lister).
	holds atomic.Int32
}

// newListOp is the operation of a list of reqs (of total bytes), held by
// its caller until it calls release.
func newListOp(ep *Endpoint, reqs []datapath.Req, total uint64) *listOp {
	n := len(reqs)
	o := &listOp{ep: ep, reqs: reqs, n: n, bytes: total, done: make([]atomic.Uint64, (n+63)/64), start: opClock()}
	o.left.Store(int64(n))
	o.holds.Store(2)
	o.initBatch(n)
	return o
}

// ended notes that k more elements were counted (their requests read).
func (o *listOp) ended(k int) {
	if o.left.Add(-int64(k)) == 0 {
		o.release()
	}
}

// release lets go of one of the two holds on the requests.
func (o *listOp) release() {
	if o.holds.Add(-1) == 0 {
		reqs := o.reqs
		o.reqs = nil
		o.ep.e.putListReqs(reqs)
	}
}

func (o *listOp) count(i int, err error) bool {
	if i < 0 || i >= o.n {
		return false
	}
	if bit := uint64(1) << (i % 64); o.done[i/64].Or(bit)&bit != 0 {
		return false
	}
	d := opClock() - o.start
	n := o.reqs[i].Local.Len
	o.ended(1)
	o.ep.ops.record(n, err)
	o.ep.e.transportOps(o.ep.path.Kind()).record(n, d, err)
	return true
}

// Complete implements datapath.Completer: element idx ended.
func (o *listOp) Complete(idx int, err error) {
	if o.count(idx, err) {
		o.f.Complete(idx, err)
	}
}

// CompleteOK implements datapath.ManyCompleter: the elements of idx
// ended without error, counted together (one clock reading).
func (o *listOp) CompleteOK(idx []int) {
	// The bits of a word are set together: one atomic operation for up
	// to 64 elements when idx runs in order, as a path's does. The
	// elements' bytes are read only if not every element ends here.
	var stack [16]uint64
	fresh := stack[:0] // bit i%64 of fresh[i/64]: element i ends here
	if len(o.done) > len(stack) {
		fresh = make([]uint64, 0, len(o.done))
	}
	fresh = fresh[:len(o.done)]
	n := 0
	word, mask := -1, uint64(0)
	flush := func() {
		if mask != 0 {
			f := mask &^ o.done[word].Or(mask)
			fresh[word] |= f
			n += bits.OnesCount64(f)
		}
	}
	for _, i := range idx {
		if i < 0 || i >= o.n {
			continue
		}
		if i/64 != word {
			flush()
			word, mask = i/64, 0
		}
		mask |= 1 << (i % 64)
	}
	flush()
	if n == 0 {
		return
	}
	bytes := o.bytes
	if n != o.n {
		bytes = 0
		for w, f := range fresh {
			for ; f != 0; f &= f - 1 {
				bytes += o.reqs[w*64+bits.TrailingZeros64(f)].Local.Len
			}
		}
	}
	o.ended(n)
	d := opClock() - o.start
	o.ep.ops.recordOK(uint64(n), bytes)
	o.ep.e.transportOps(o.ep.path.Kind()).recordOK(uint64(n), bytes, d)
	o.f.CompleteN(n)
}

// CompleteAll implements datapath.Completer: every element not ended yet
// ends with err.
func (o *listOp) CompleteAll(err error) {
	for i := range o.n {
		o.count(i, err)
	}
	o.f.CompleteAll(err)
}

var _ datapath.ManyCompleter = (*listOp)(nil)

// listElem is the completer of element i of a list run by Start (paths
// without a list form): its operation's end, or its CompleteAll (its
// deadline), ends element i only.
type listElem struct {
	o *listOp
	i int
}

func (c *listElem) Complete(_ int, err error) { c.o.Complete(c.i, err) }
func (c *listElem) CompleteAll(err error)     { c.o.Complete(c.i, err) }
