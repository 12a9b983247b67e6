package agent

import (
	"context"
	"errors"
	"sync"

	"github.com/gxfer/gxfer/engine"
)

// RemoteDesc is the remote side of a prepared descriptor: Len bytes of
// the peer's section at Off (Len 0: the local slice's length).
type RemoteDesc struct {
	Section string
	Off     int
	Len     int
}

// Prepared is a fixed pair of descriptor lists to one peer (local[i] with
// remote[i]), checked and turned into engine keys once; its Write and
// Read post any subset by index, with no lookup: the KV-cache pattern.
// It belongs to one incarnation of the peer: once the peer is dropped
// (Peer.Done), posts fail with its PeerError and the lists must be
// prepared again.
type Prepared struct {
	p     *Peer
	local []engine.Slice
	keys  []engine.RemoteKey // descriptor i's key
	// next[i]: descriptor i+1 follows i in both local and remote memory.
	next []bool
	// base[i] is the start of the coalescible group i is in; baseKey[i]
	// (for group starts) is a key granting the whole group (narrowing it
	// further is cheap: no signature to derive).
	base    []int32
	baseKey []engine.RemoteKey
	roff    []int
	// runs recycles the run lists of finished posts.
	runs sync.Pool
}

// prepareCtxEvery: Prepare looks at its ctx every this many descriptors
// (a list of millions takes seconds to check).
const prepareCtxEvery = 1 << 14

// Prepare checks the pairs (local[i], remote[i]) against the named peer's
// sections and prepares them; a failure names the index (DescError).
// It ends with ErrCanceled or ErrTimeout when ctx ends first.
func (a *Agent) Prepare(ctx context.Context, peer string, local []engine.Slice, remote []RemoteDesc) (*Prepared, error) {
	if ctx == nil {
		return nil, invalid("nil context")
	}
	p, err := a.Peer(ctx, peer)
	if err != nil {
		return nil, err
	}
	return p.Prepare(ctx, local, remote)
}

// Prepare prepares descriptor lists for this peer (see Agent.Prepare).
func (p *Peer) Prepare(ctx context.Context, local []engine.Slice, remote []RemoteDesc) (*Prepared, error) {
	if ctx == nil {
		return nil, invalid("nil context")
	}
	if len(local) != len(remote) {
		return nil, invalid("%d local and %d remote descriptors", len(local), len(remote))
	}
	if len(local) == 0 {
		return nil, invalid("no descriptors")
	}
	if len(local) > 1<<30 {
		return nil, invalid("%d descriptors", len(local))
	}
	n := len(local)
	x := &Prepared{
		p: p, local: append([]engine.Slice(nil), local...),
		keys: make([]engine.RemoteKey, n), next: make([]bool, n),
		base: make([]int32, n), baseKey: make([]engine.RemoteKey, n), roff: make([]int, n),
	}
	var sec *peerSection
	for i := range n {
		if i%prepareCtxEvery == 0 && ctx.Err() != nil {
			return nil, ctxErr(ctx)
		}
		d := Desc{Local: local[i], Section: remote[i].Section, Off: remote[i].Off, Len: remote[i].Len}
		if err := p.check(i, &d, &sec); err != nil {
			return nil, err
		}
		x.roff[i] = d.Off
		if i > 0 && remote[i-1].Section == d.Section && local[i-1].Buffer() == local[i].Buffer() &&
			local[i-1].Offset()+local[i-1].Len() == local[i].Offset() && remote[i-1].Off+local[i-1].Len() == d.Off {
			x.next[i-1] = true
			x.base[i] = x.base[i-1]
		} else {
			x.base[i] = int32(i)
		}
	}
	// One key per group, then each descriptor's narrowed from it.
	for i, seen := 0, 0; i < n; {
		if i >= seen {
			if ctx.Err() != nil {
				return nil, ctxErr(ctx)
			}
			seen = i + prepareCtxEvery
		}
		j := i + 1
		for j < n && x.next[j-1] {
			j++
		}
		last := j - 1
		glen := x.roff[last] + local[last].Len() - x.roff[i]
		ps := p.keys[remote[i].Section]
		gk := ps.key.Slice(x.roff[i], glen)
		if err := gk.Err(); err != nil {
			return nil, &DescError{Index: i, Err: err}
		}
		x.baseKey[i] = gk
		for k := i; k < j; k++ {
			x.keys[k] = gk.Slice(x.roff[k]-x.roff[i], local[k].Len())
			if err := x.keys[k].Err(); err != nil {
				return nil, &DescError{Index: k, Err: err}
			}
		}
		i = j
	}
	return x, nil
}

// Len is the number of prepared descriptors.
func (x *Prepared) Len() int { return len(x.local) }

// Peer is the peer the lists were prepared for.
func (x *Prepared) Peer() *Peer { return x.p }

// Write posts the prepared descriptors idx (any subset, any order; nil:
// all of them, in order) as one Xfer of puts. Runs of consecutive indices
// that are adjacent in memory are coalesced. The Xfer's Status has one
// entry per element of idx.
func (x *Prepared) Write(ctx context.Context, idx []int, opts ...XferOption) *Xfer {
	return x.post(ctx, true, idx, opts)
}

// Read posts the prepared descriptors idx as one Xfer of gets (see Write).
func (x *Prepared) Read(ctx context.Context, idx []int, opts ...XferOption) *Xfer {
	return x.post(ctx, false, idx, opts)
}

func (x *Prepared) post(ctx context.Context, write bool, idx []int, opts []XferOption) *Xfer {
	p := x.p
	var cfg xferConfig
	for _, o := range opts {
		o(&cfg)
	}
	nd := len(idx)
	if idx == nil {
		nd = len(x.local)
	}
	if cfg.hasNotify && len(cfg.notify) > MaxNotify {
		return p.a.failed(nd, invalid("notification of %d bytes, over %d", len(cfg.notify), MaxNotify))
	}
	// Only the first list's runs are planned before it is issued: the
	// first byte moves after the indices' check and a few runs, the rest
	// is planned meanwhile (p.post calls planRest).
	runs, err := x.planFirst(idx, nd, syncRuns)
	if err != nil {
		xf := p.a.failed(nd, err)
		var de *DescError
		if errors.As(err, &de) {
			for j := range xf.errs {
				if j != de.Index {
					xf.errs[j] = ErrNotSubmitted
				}
			}
		}
		return xf
	}
	return p.post(ctx, write, nd, runs, &cfg, x.recycle, func(runs []run) []run { return x.planRest(idx, nd, runs) })
}

// recycle takes back the run list of a finished post.
func (x *Prepared) recycle(runs []run) {
	clear(runs) // drop the outcomes and merged keys
	runs = runs[:0]
	x.runs.Put(&runs)
}

// merged is the slice and key of a run of several prepared descriptors.
type merged struct {
	local engine.Slice
	key   engine.RemoteKey
}

// planFirst checks every index, then plans the runs of the first ones:
// until it has maxRuns runs (see planRest for the others).
func (x *Prepared) planFirst(idx []int, nd, maxRuns int) ([]run, error) {
	if idx != nil {
		for k, i := range idx[:nd] {
			if i < 0 || i >= len(x.local) {
				return nil, &DescError{Index: k, Err: invalid("index %d of %d prepared descriptors", i, len(x.local))}
			}
		}
	}
	var runs []run
	if rp, _ := x.runs.Get().(*[]run); rp != nil && cap(*rp) >= nd {
		runs = (*rp)[:0]
	} else {
		runs = make([]run, 0, max(nd, len(x.local)))
	}
	return x.planRuns(idx, nd, 0, maxRuns, runs), nil
}

// planRest appends the runs of the indices after those of runs.
func (x *Prepared) planRest(idx []int, nd int, runs []run) []run {
	k := 0
	if len(runs) > 0 {
		last := &runs[len(runs)-1]
		k = int(last.first + last.n)
	}
	return x.planRuns(idx, nd, k, nd, runs)
}

// planRuns appends the runs of indices k.. (checked) until there are
// maxRuns runs (each whole: planRest goes on where a run ended).
func (x *Prepared) planRuns(idx []int, nd, k, maxRuns int, runs []run) []run {
	at := func(k int) int {
		if idx == nil {
			return k
		}
		return idx[k]
	}
	for k < nd && len(runs) < maxRuns {
		i := at(k)
		// Extend over following indices that continue i's group.
		j, last := k+1, i
		for j < nd {
			nx := at(j)
			if nx != last+1 || !x.next[last] {
				break
			}
			last = nx
			j++
		}
		runs = runs[:len(runs)+1]
		r := &runs[len(runs)-1]
		r.first, r.n, r.err = int32(k), int32(j-k), nil
		if last == i {
			r.local, r.key = &x.local[i], &x.keys[i]
			r.bytes = x.local[i].Len()
		} else {
			n := x.local[last].Offset() + x.local[last].Len() - x.local[i].Offset()
			m := &merged{local: x.local[i].Buffer().Slice(x.local[i].Offset(), n)}
			b := x.base[i]
			m.key = x.baseKey[b].Slice(x.roff[i]-x.roff[b], n)
			r.local, r.key, r.bytes = &m.local, &m.key, n
		}
		k = j
	}
	return runs
}
