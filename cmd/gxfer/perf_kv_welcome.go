package main

import (
	"context"
	"errors"
	"fmt"
)

// The target's answers to hellos (perf_kv.go, kvTarget.run): on
// goroutines of their own, since reaching an initiator may take a dial's
// timeout.

// maxHellos bounds the hellos a target answers at once.
const maxHellos = 64

// maxAcksQueued bounds the acknowledgements waiting to go to an
// initiator: at most -O (at most 1024) for one that takes them.
const maxAcksQueued = 1024

// helloResult is how the welcome of an initiator went.
type helloResult struct {
	from   string
	inc    uint64 // its incarnation
	source string // where its hello came from (agent.Notification.Source)
	base   uint64
	err    error
}

// regionReq asks the target's loop for the region of initiator from;
// the loop answers on reply (buffered), errNoRegion if every region is in
// use.
type regionReq struct {
	from  string
	inc   uint64 // its incarnation
	reply chan regionReply
}

type regionReply struct {
	base uint64
	err  error
}

var errNoRegion = errors.New("hello: every region of the section is in use")

// errIdled: the initiator (this incarnation of it) was ended for sending
// no request within the target's -wait.
var errIdled = errors.New("hello: it was idle")

// welcome answers the hello m of initiator from: it reaches it (at the
// hello's address when there is no store), takes a region of the section
// for it (only then: a hello that cannot be answered holds none), and
// sends its welcome.
func (t *kvTarget) welcome(ctx context.Context, from string, inc uint64, m kvMsg, regions chan<- regionReq) (uint64, error) {
	if t.connect {
		addr := m.unix
		if addr == "" {
			addr = m.tcp
		}
		if _, err := t.a.Connect(ctx, addr); err != nil {
			return 0, fmt.Errorf("cannot reach it at %s: %w", addr, err)
		}
	}
	q := regionReq{from: from, inc: inc, reply: make(chan regionReply, 1)}
	select {
	case regions <- q:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	r := <-q.reply
	if r.err != nil {
		return 0, r.err
	}
	if err := t.a.Notify(ctx, from, kvMsg{kind: kvWelcome, p: m.p, base: r.base}.encode()); err != nil {
		return r.base, fmt.Errorf("gone before its welcome: %w", err)
	}
	return r.base, nil
}
