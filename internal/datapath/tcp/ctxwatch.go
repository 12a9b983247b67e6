package tcp

import (
	"context"
	"sync"
	"sync/atomic"
)

// ctxWatch lets the requests of a path share one context.AfterFunc per
// context they watch, found by its Done channel (contexts that share one
// end together: a context.WithValue child and its parent). A request that
// watches a context already watched joins its list under one mutex; a
// context.AfterFunc and its stop per request take the context's own lock
// and update its children twice, and cost a TCP put about 2.6 us of
// user time here (session 38, perf of a 1 MiB put_bw: 7% of the sender's
// user time).
//
// An entry whose last request ends may stay registered, for the next
// request of the same context (a caller that passes one context to every
// request: one registration for all). At most one such idle entry is
// kept; another going idle stops it. Two patterns make keeping one a
// loss, and then the entry is stopped at once, as each request's own
// registration was before:
//   - the request that leaves it last has another context than the one it
//     was registered with (a context.WithValue child of it, say): the
//     registration holds that context, and with it its values, for as long
//     as it stays;
//   - the caller ends each request's context after it (a context per
//     request, canceled when the request returns): an idle registration
//     then fires instead of being stopped, which costs a goroutine of the
//     context package's, more than the stop. The watch counts idle
//     entries that fired against idle entries that served a request again,
//     and keeps none while the first are more, but one in probeEvery, so
//     that a caller that turns to one context for all finds it kept again.
type ctxWatch struct {
	mu     sync.Mutex
	ents   map[<-chan struct{}]*ctxEnt
	idle   *ctxEnt // registered, no request in it
	closed bool    // the path ended: nothing is watched any more
	// reused counts idle entries taken by a request, wasted idle entries
	// whose context ended (their registration fired), declined entries
	// not kept idle because wasted was more (see remove).
	reused, wasted, declined int

	// For tests: context.AfterFunc calls, stops that kept the function
	// from running, fire calls returned.
	registered, stopped, fired atomic.Int64
}

// ctxEnt is one watched context: its registration and the requests that
// watch it, in a list through their ctxNodes.
type ctxEnt struct {
	done <-chan struct{}
	ctx  context.Context // the one registered (AfterFunc holds it too)
	stop func() bool
	head *ctxNode
	n    int
}

// ctxEnder is told that the context it watched ended.
type ctxEnder interface{ ctxEnded(context.Context) }

// ctxNode is a request's place in a ctxWatch (ctxWatch.mu guards it).
type ctxNode struct {
	ent        *ctxEnt // nil: not in any list
	prev, next *ctxNode
	ctx        context.Context // the request's own (ctxEnded reads its Err)
	who        ctxEnder
}

// add makes n's owner told (ctxEnded, on a goroutine of the context
// package's) when ctx ends, until remove; ctx.Done() must not be nil. It
// reports false when the path ended (nothing is watched any more).
func (w *ctxWatch) add(ctx context.Context, n *ctxNode, who ctxEnder) bool {
	done := ctx.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	e := w.ents[done]
	if e == nil {
		if w.ents == nil {
			w.ents = map[<-chan struct{}]*ctxEnt{}
		}
		e = &ctxEnt{done: done, ctx: ctx}
		w.ents[done] = e
		w.registered.Add(1)
		// A context that has ended runs fire at once, on a goroutine of
		// its own: not under w.mu.
		e.stop = context.AfterFunc(ctx, func() { w.fire(e) })
	}
	if w.idle == e {
		w.idle = nil
		w.count(&w.reused)
	}
	n.ent, n.ctx, n.who = e, ctx, who
	n.prev, n.next = nil, e.head
	if e.head != nil {
		e.head.prev = n
	}
	e.head = n
	e.n++
	return true
}

// remove takes n out of its context's list (its request ended first); it
// does nothing when the context's end already took it. An entry left
// empty becomes the idle one, the previous idle one is stopped; or it is
// stopped itself (see ctxWatch).
func (w *ctxWatch) remove(n *ctxNode) {
	w.mu.Lock()
	e := n.ent
	if e == nil {
		w.mu.Unlock()
		return
	}
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		e.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	}
	last := n.ctx
	n.ent, n.prev, n.next, n.ctx, n.who = nil, nil, nil, nil, nil
	e.n--
	var stop func() bool
	if e.n == 0 && w.ents[e.done] == e {
		drop := e
		if sameCtx(last, e.ctx) && w.keepIdle() {
			drop, w.idle = w.idle, e
		}
		if drop != nil {
			delete(w.ents, drop.done)
			stop = drop.stop
		}
	}
	w.mu.Unlock()
	if stop != nil && stop() {
		w.stopped.Add(1)
	}
}

// keepIdle reports whether an entry left without requests stays
// registered (w.mu held): while idle entries were reused at least as often
// as they fired, and one in probeEvery else.
func (w *ctxWatch) keepIdle() bool {
	if w.reused >= w.wasted {
		return true
	}
	w.declined++
	return w.declined%probeEvery == 0
}

// probeEvery: one in this many entries left without requests stays
// registered even while idle entries fired more often than they were
// reused (keepIdle).
const probeEvery = 64

// count adds one to c (reused or wasted; w.mu held), halving both now and
// then so that the last few hundred idle entries decide.
func (w *ctxWatch) count(c *int) {
	*c++
	if *c >= 256 {
		w.reused /= 2
		w.wasted /= 2
	}
}

// sameCtx reports whether a and b are the same context. A context type
// that cannot be compared is taken for another.
func sameCtx(a, b context.Context) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// fire tells every request still in e that its context ended.
func (w *ctxWatch) fire(e *ctxEnt) {
	defer w.fired.Add(1)
	w.mu.Lock()
	if w.ents[e.done] != e {
		w.mu.Unlock()
		return // stopped too late (evicted idle, or the path ended): empty
	}
	delete(w.ents, e.done)
	if w.idle == e {
		w.idle = nil
		w.count(&w.wasted)
	}
	type ended struct {
		ctx context.Context
		who ctxEnder
	}
	list := make([]ended, 0, e.n)
	for n := e.head; n != nil; {
		next := n.next
		list = append(list, ended{n.ctx, n.who})
		n.ent, n.prev, n.next, n.ctx, n.who = nil, nil, nil, nil, nil
		n = next
	}
	e.head, e.n = nil, 0
	w.mu.Unlock()
	for _, x := range list {
		x.who.ctxEnded(x.ctx)
	}
}

// close stops every registration (the path ended). The requests still in
// a list stay there until they end (remove), told nothing.
func (w *ctxWatch) close() {
	w.mu.Lock()
	w.closed = true
	stops := make([]func() bool, 0, len(w.ents))
	for _, e := range w.ents {
		stops = append(stops, e.stop)
	}
	clear(w.ents)
	w.idle = nil
	w.mu.Unlock()
	for _, stop := range stops {
		if stop() {
			w.stopped.Add(1)
		}
	}
}

// watched is the number of contexts registered now (tests).
func (w *ctxWatch) watched() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ents)
}
