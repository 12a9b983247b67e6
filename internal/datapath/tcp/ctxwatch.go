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
// An entry whose last request ends stays registered, for the next request
// of the same context (a caller that passes one context to every request:
// one registration for all). At most one such idle entry is kept: a
// caller that makes a context per request leaves a trail of them, each
// stopped when the next goes idle, which is the registration and stop per
// request it paid before.
type ctxWatch struct {
	mu     sync.Mutex
	ents   map[<-chan struct{}]*ctxEnt
	idle   *ctxEnt // registered, no request in it
	closed bool    // the path ended: nothing is watched any more

	registered atomic.Int64 // context.AfterFunc calls (tests)
}

// ctxEnt is one watched context: its registration and the requests that
// watch it, in a list through their ctxNodes.
type ctxEnt struct {
	done <-chan struct{}
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
		e = &ctxEnt{done: done}
		w.ents[done] = e
		w.registered.Add(1)
		// A context that has ended runs fire at once, on a goroutine of
		// its own: not under w.mu.
		e.stop = context.AfterFunc(ctx, func() { w.fire(e) })
	}
	if w.idle == e {
		w.idle = nil
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
// empty becomes the idle one, the previous idle one is stopped.
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
	n.ent, n.prev, n.next, n.ctx, n.who = nil, nil, nil, nil, nil
	e.n--
	var stop func() bool
	if e.n == 0 && w.ents[e.done] == e {
		old := w.idle
		w.idle = e
		if old != nil {
			delete(w.ents, old.done)
			stop = old.stop
		}
	}
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// fire tells every request still in e that its context ended.
func (w *ctxWatch) fire(e *ctxEnt) {
	w.mu.Lock()
	if w.ents[e.done] != e {
		w.mu.Unlock()
		return // stopped too late (evicted idle, or the path ended): empty
	}
	delete(w.ents, e.done)
	if w.idle == e {
		w.idle = nil
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
		stop()
	}
}

// watched is the number of contexts registered now (tests).
func (w *ctxWatch) watched() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ents)
}
