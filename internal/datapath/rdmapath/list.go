package rdmapath

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

var _ datapath.Lister = (*Path)(nil)

// StartList spreads a list of Puts or Gets over the queue pairs of the
// NICs both sides have: each request of host memory with an rkey goes
// whole to the NIC with the fewest bytes of the list so far, among those
// the key has an rkey for. Requests Start would split over the NICs
// itself (SliceMin bytes or more), stage (Gaudi memory) or delegate (no
// rkey) go through Start. One timer ends the list at its deadline.
func (p *Path) StartList(ctx context.Context, reqs []datapath.Req, c datapath.Completer) {
	if len(reqs) == 0 {
		return
	}
	l := &list{c: c}
	l.left.Store(int32(len(reqs)))
	l.timer = p.deadlineTimer(c, reqs[0].Deadline)
	var load [1 + wire.MaxNICs]uint64
	for i := range reqs {
		r := &reqs[i]
		ic := &listItem{l: l, i: i}
		k := &r.Key
		if k.RKey == 0 || r.Local.IsGaudi() || (r.Local.Len >= SliceMin && len(p.conns) > 1) {
			p.Start(ctx, *r, ic)
			continue
		}
		start, err := k.Span(0, k.Len)
		if err != nil {
			ic.Complete(0, gxerr.New(gxerr.Invalid, "remote key view", err))
			continue
		}
		nic, rkey := pickNIC(&load, len(p.conns), k)
		load[nic] += r.Local.Len
		x := &xfer{p: p, c: ic}
		x.parts.Store(1)
		p.zeroCopy.Add(1)
		p.part(ctx, x, p.conns[nic], r.Put, r.Put, r.Local, rdma.RemoteAddr{Addr: k.Base + start, RKey: rkey})
	}
}

// pickNIC is the NIC of the first conns with the fewest bytes in load
// among those k has an rkey for, and that rkey.
func pickNIC(load *[1 + wire.MaxNICs]uint64, conns int, k *wire.RemoteKey) (int, uint32) {
	nic, rkey := 0, k.RKey
	for j := 1; j < conns && j <= len(k.NICRKeys); j++ {
		if rk := k.NICRKeys[j-1]; rk != 0 && load[j] < load[nic] {
			nic, rkey = j, rk
		}
	}
	return nic, rkey
}

// list is a StartList in progress: its last request stops the deadline's
// timer.
type list struct {
	c     datapath.Completer
	left  atomic.Int32
	timer *time.Timer
}

// listItem resolves request i of a list.
type listItem struct {
	l    *list
	i    int
	done atomic.Bool
}

func (it *listItem) Complete(_ int, err error) {
	if it.done.Swap(true) {
		return
	}
	it.l.c.Complete(it.i, err)
	if it.l.left.Add(-1) == 0 && it.l.timer != nil {
		it.l.timer.Stop()
	}
}

// CompleteAll (a request's own deadline, through Start) resolves request i
// only.
func (it *listItem) CompleteAll(err error) { it.Complete(0, err) }
