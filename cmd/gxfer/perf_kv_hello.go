package main

import (
	"errors"
	"fmt"
)

// maxHellosPerSource bounds the hellos a target answers at once from one
// source (agent.Notification.Source: where the peer connects from, as
// the socket says): a peer chooses its name, so one host sending hellos
// under many names would take every slot otherwise.
const maxHellosPerSource = maxHellos / 4

// maxFailedKept bounds the peers whose welcome failed a target keeps.
const maxFailedKept = 1024

// helloSlots are the hellos a target is answering (kvTarget.run): at
// most maxHellos, maxHellosPerSource from one source and one per peer
// (answering: a peer sending hellos faster than they are answered would
// otherwise take every slot). A peer whose welcome failed (that run of
// it, its incarnation: a restarted one is answered) is not answered
// again: it said where it is and was not there, or went, and each of
// its hellos would hold a slot for up to -wait.
type helloSlots struct {
	n         int
	answering map[string]bool // by peer name
	bySource  map[string]int  // by source
	failed    keptRuns        // the runs whose welcome failed
}

func newHelloSlots() *helloSlots {
	return &helloSlots{answering: map[string]bool{}, bySource: map[string]int{}, failed: *newKeptRuns()}
}

func newKeptRuns() *keptRuns { return &keptRuns{inc: map[string]uint64{}} }

// keptRuns are runs of peers (name: incarnation, the latest of each name)
// a target does not answer again, at most maxFailedKept: one more
// forgets the oldest, so that a peer adding runs makes the target forget
// no more than that (not every run kept at once).
type keptRuns struct {
	inc   map[string]uint64
	order []string // the names of inc, oldest first
}

func (k *keptRuns) add(name string, inc uint64) {
	if _, ok := k.inc[name]; !ok {
		if len(k.order) >= maxFailedKept {
			delete(k.inc, k.order[0])
			k.order = k.order[1:]
		}
		k.order = append(k.order, name)
	}
	k.inc[name] = inc
}

func (k *keptRuns) has(name string, inc uint64) bool {
	i, ok := k.inc[name]
	return ok && i == inc
}

// take takes a slot for the hello of peer from (incarnation inc) that
// came from source, or says why it is dropped.
func (h *helloSlots) take(from string, inc uint64, source string) error {
	if h.failed.has(from, inc) {
		return errors.New("hello: its welcome failed (this run of it): not answered again")
	}
	if h.answering[from] {
		return errors.New("hello: one from it is being answered already")
	}
	if h.n >= maxHellos {
		return fmt.Errorf("hello: %d hellos are being answered already", maxHellos)
	}
	if h.bySource[source] >= maxHellosPerSource {
		return fmt.Errorf("hello: %d hellos from its source (%s) are being answered already", maxHellosPerSource, source)
	}
	h.n++
	h.answering[from] = true
	h.bySource[source]++
	return nil
}

// done frees the slot of a hello answered (r). A hello refused for want
// of a region is no welcome that failed: the peer was reached, and a
// region may free. (One from a run ended as idle is kept: that run is
// never welcomed again, and its hellos are then refused here, before
// they cost a dial.)
func (h *helloSlots) done(r helloResult) {
	h.n--
	delete(h.answering, r.from)
	if h.bySource[r.source]--; h.bySource[r.source] <= 0 {
		delete(h.bySource, r.source)
	}
	if r.err != nil && !errors.Is(r.err, errNoRegion) {
		h.failed.add(r.from, r.inc)
	}
}
