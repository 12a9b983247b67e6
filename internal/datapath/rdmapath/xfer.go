package rdmapath

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/staging"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// op is the part of a transfer carried by one NIC's queue pair: one or
// more work requests between local registered memory and a peer region;
// the CQ completes it. Its transfer resolves when every part has
// finished.
type op struct {
	x     *xfer
	cn    *conn
	local datapath.Mem
	ref   rdma.MRRef // local host memory's region (zero for a DMA-BUF region)
	left  atomic.Int32
	mu    sync.Mutex
	err   error
}

// xfer is a transfer of one or more parts (op), resolving c once with the
// first error of its parts when the last has finished.
type xfer struct {
	p     *Path
	c     datapath.Completer
	timer *time.Timer // the deadline's (nil without one)
	parts atomic.Int32
	mu    sync.Mutex
	err   error
}

func (o *op) setErr(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
}

// Complete runs on whichever goroutine polled the CQ.
func (o *op) Complete(c rdma.Completion) {
	o.cn.put(1)
	if c.Err != nil {
		o.setErr(o.x.p.wrFailed(c.Op, c.Err))
	}
	if o.left.Add(-1) == 0 {
		o.finish()
	}
}

func (o *op) finish() {
	if !o.ref.IsZero() {
		o.cn.n.mrs.Put(o.ref)
	}
	o.local.B.Release()
	o.mu.Lock()
	err := o.err
	o.mu.Unlock()
	o.x.partDone(err)
}

// partDone ends one part of the transfer; the last stops the deadline's
// timer and resolves the transfer.
func (x *xfer) partDone(err error) {
	x.mu.Lock()
	if x.err == nil {
		x.err = err
	}
	x.mu.Unlock()
	if x.parts.Add(-1) != 0 {
		return
	}
	if x.timer != nil {
		x.timer.Stop()
	}
	x.mu.Lock()
	err = x.err
	x.mu.Unlock()
	x.c.Complete(0, err)
}

// direct writes local to remote (toRemote) or reads remote into local
// with RDMA, straight from and into local's memory: host memory through
// the MR cache, Gaudi memory through its DMA-BUF region (the caller has
// checked it exists). remote.RKey is the peer region's on its first NIC;
// nicRKeys[i], when not 0, the same region's on its NIC i+1: a transfer
// of host memory of at least SliceMin bytes is then split over the NICs
// both sides have, in slices aligned to sliceAlign. ctx bounds the waits
// for send credits: the parts not yet posted when it ends fail with its
// error, those posted complete first.
func (p *Path) direct(ctx context.Context, toRemote, own bool, local datapath.Mem, remote rdma.RemoteAddr, nicRKeys []uint32, deadline time.Time, c datapath.Completer) {
	// On the stack: no allocation for the slices of a transfer of one part.
	var rkeyBuf [wire.MaxNICs]uint32
	var partBuf [wire.MaxNICs]rdma.Slice
	rkeys := append(rkeyBuf[:0], remote.RKey)
	if !local.IsGaudi() {
		rkeys = p.nicRKeys(rkeys, local.Len, nicRKeys)
	}
	parts := append(partBuf[:0], rdma.Slice{Len: local.Len})
	if len(rkeys) > 1 {
		var err error
		if parts, err = rdma.AppendSplit(partBuf[:0], local.Len, len(rkeys), sliceAlign); err != nil {
			c.Complete(0, gxerr.New(gxerr.Invalid, "RDMA slices", err))
			return
		}
	}
	x := &xfer{p: p, c: c}
	x.parts.Store(int32(len(parts)))
	x.timer = p.deadlineTimer(c, deadline)
	for _, sl := range parts {
		p.part(ctx, x, p.conns[sl.NIC], toRemote && own, toRemote, local.Sub(sl.Off, sl.Len), rdma.RemoteAddr{Addr: remote.Addr + sl.Off, RKey: rkeys[sl.NIC]})
	}
}

// part posts one part of x on the queue pair cn; its result reaches x.
// fence: note its writes for the next fence.
func (p *Path) part(ctx context.Context, x *xfer, cn *conn, fence, toRemote bool, local datapath.Mem, remote rdma.RemoteAddr) {
	if err := local.B.Acquire(); err != nil {
		x.partDone(err)
		return
	}
	o := &op{x: x, cn: cn, local: local}
	var seg func(off, m uint64) rdma.Seg
	if local.IsGaudi() {
		mr, err := p.t.gaudiMR(local.B)
		if err != nil {
			local.B.Release()
			x.partDone(err)
			return
		}
		seg = func(off, m uint64) rdma.Seg { return mr.Seg(local.Off+off, m) }
	} else {
		addr := local.Addr()
		ref, err := cn.n.mrs.Get(addr, local.Len, rdma.AccessLocalWrite)
		if err != nil {
			local.B.Release()
			x.partDone(gxerr.New(gxerr.NotSupported, "RDMA registration of local memory", err))
			return
		}
		o.ref = ref
		seg = func(off, m uint64) rdma.Seg { return ref.Seg(addr+off, m) }
	}
	kind := rdma.OpRead
	if toRemote {
		kind = rdma.OpWrite
	}
	wrs := make([]rdma.WR, numWRs(local.Len))
	for i := range wrs {
		off := uint64(i) * maxWR
		m := min(maxWR, local.Len-off)
		wrs[i] = rdma.WR{Op: kind, Local: []rdma.Seg{seg(off, m)}, Remote: rdma.RemoteAddr{Addr: remote.Addr + off, RKey: remote.RKey}, Done: o,
			Inline: toRemote && !local.IsGaudi() && m <= uint64(cn.maxInline)}
	}
	o.left.Store(int32(len(wrs)))
	posted, err := p.post(ctx, cn, wrs, nil)
	if fence && posted > 0 {
		cn.noteWrite(wrs[posted-1].Remote, wrs[posted-1].Local[0].Len)
	}
	if err != nil {
		o.setErr(err)
		if o.left.Add(-int32(len(wrs)-posted)) == 0 {
			o.finish()
		}
	}
}

// numWRs is how many work requests carry n bytes (maxWR each).
func numWRs(n uint64) int { return int((n + maxWR - 1) / maxWR) }

// one posts one work request on the queue pair cn; the function returned
// waits for its result.
func (p *Path) one(ctx context.Context, cn *conn, kind rdma.OpKind, seg rdma.Seg, remote rdma.RemoteAddr) func() error {
	wait, err := p.postOne(ctx, cn, kind, seg, remote)
	if err != nil {
		return func() error { return err }
	}
	return wait
}

// postOne is one, with a failed post (nothing posted) reported at once.
func (p *Path) postOne(ctx context.Context, cn *conn, kind rdma.OpKind, seg rdma.Seg, remote rdma.RemoteAddr) (func() error, error) {
	ch := make(chan error, 1)
	done := rdma.CompleterFunc(func(c rdma.Completion) {
		cn.put(1)
		if c.Err != nil {
			ch <- p.wrFailed(c.Op, c.Err)
			return
		}
		ch <- nil
	})
	if _, err := p.post(ctx, cn, []rdma.WR{{Op: kind, Local: []rdma.Seg{seg}, Remote: remote, Done: done}}, nil); err != nil {
		return nil, err
	}
	return func() error { return <-ch }, nil
}

// stagedMove moves Gaudi memory g to the peer region at remote (toRemote:
// DMA into a pinned host chunk, RDMA write) or the region into g (RDMA
// read into a host chunk, DMA to the device), through two staging
// buffers (staging.Pipeline): the DMA of one chunk overlaps the RDMA of
// the other. Chunk i goes over NIC i mod k, for the k NICs a transfer of
// its size spreads over (see nicRKeys). When ctx ends no further chunk
// starts; it returns once those started have ended.
func (p *Path) stagedMove(ctx context.Context, toRemote, own bool, g datapath.Mem, remote rdma.RemoteAddr, nicRKeys []uint32) error {
	var rkeyBuf [wire.MaxNICs]uint32
	rkeys := p.nicRKeys(append(rkeyBuf[:0], remote.RKey), g.Len, nicRKeys)
	// A staging buffer's region on each NIC, made on first use and held
	// until the transfer ends (the pipeline waits for every chunk first).
	type bufRefs struct {
		b   datapath.Buf
		ref [wire.MaxNICs]rdma.MRRef
	}
	var refs []*bufRefs
	defer func() {
		for _, r := range refs {
			for nic, rf := range r.ref {
				if !rf.IsZero() {
					p.conns[nic].n.mrs.Put(rf)
				}
			}
		}
	}()
	kind := rdma.OpRead
	if toRemote {
		kind = rdma.OpWrite
	}
	net := func(i int, off uint64, host datapath.Mem) (func() error, error) {
		nic := i % len(rkeys)
		cn := p.conns[nic]
		var r *bufRefs
		for _, x := range refs {
			if x.b == host.B {
				r = x
			}
		}
		if r == nil {
			r = &bufRefs{b: host.B}
			refs = append(refs, r)
		}
		if r.ref[nic].IsZero() {
			rf, err := cn.n.mrs.Get(host.B.Addr(), Chunk, rdma.AccessLocalWrite)
			if err != nil {
				return nil, gxerr.New(gxerr.NotSupported, "RDMA registration of a staging buffer", err)
			}
			r.ref[nic] = rf
		}
		seg := r.ref[nic].Seg(host.Addr(), host.Len)
		to := rdma.RemoteAddr{Addr: remote.Addr + off, RKey: rkeys[nic]}
		wait := p.one(ctx, cn, kind, seg, to)
		if toRemote && own {
			cn.noteWrite(to, host.Len)
		}
		return wait, nil
	}
	pl := p.pipeline()
	if toRemote {
		return pl.Out(ctx, g, net)
	}
	return pl.In(ctx, g, net)
}

func (p *Path) pipeline() *staging.Pipeline {
	return &staging.Pipeline{
		Env: p.env, Pool: p.t.stage, Turns: p.t.stageSem, Done: p.c.Done(), Err: p.c.Err,
		Chunk: Chunk, Name: p.c.Name(), Label: "RDMA",
	}
}

// move is direct or stagedMove, whichever local's memory needs, resolving c;
// it reports whether the transfer is staged. own: a transfer this side's
// user requested (its writes are fenced before a message, fence.go), not
// one it performs for the peer.
func (p *Path) move(ctx context.Context, toRemote, own bool, local datapath.Mem, remote rdma.RemoteAddr, nicRKeys []uint32, deadline time.Time, c datapath.Completer) bool {
	if local.IsGaudi() {
		if _, err := p.t.gaudiMR(local.B); err != nil {
			p.goAsync(ctx, local, deadline, c, func() error { return p.stagedMove(ctx, toRemote, own, local, remote, nicRKeys) })
			return true
		}
	}
	p.direct(ctx, toRemote, own, local, remote, nicRKeys, deadline, c)
	return false
}

// deadlineTimer ends c with ErrTimeout at deadline (nil timer without
// one). The operation goes on: its buffers stay referenced until the NIC
// and the DMA engine are done with them, and the destination's content is
// undefined (see engine.ErrTimeout).
func (p *Path) deadlineTimer(c datapath.Completer, deadline time.Time) *time.Timer {
	if deadline.IsZero() {
		return nil
	}
	return time.AfterFunc(time.Until(deadline), func() {
		c.CompleteAll(gxerr.New(gxerr.Timeout, p.c.Name()+": RDMA operation", nil))
	})
}

// goAsync runs fn on a goroutine (holding local's buffer and one of the
// engine's transfer slots, waited for until ctx ends) and resolves c with
// its result, or with ErrTimeout at deadline (fn goes on, holding the
// buffer).
func (p *Path) goAsync(ctx context.Context, local datapath.Mem, deadline time.Time, c datapath.Completer, fn func() error) {
	if err := local.B.Acquire(); err != nil {
		c.Complete(0, err)
		return
	}
	timer := p.deadlineTimer(c, deadline)
	p.env.Go(func() {
		if timer != nil {
			defer timer.Stop()
		}
		defer local.B.Release()
		release, err := p.env.Slot(ctx)
		if err != nil {
			if ctx.Err() != nil {
				err = gxerr.Ctx(p.c.Name()+": waiting for a transfer slot", ctx.Err())
			}
			c.Complete(0, err)
			return
		}
		defer release()
		c.Complete(0, fn())
	})
}

// result is a Completer for the transfers this side runs for the peer.
type result struct {
	once sync.Once
	done chan struct{}
	err  error
}

func newResult() *result { return &result{done: make(chan struct{})} }

func (r *result) Complete(_ int, err error) { r.CompleteAll(err) }

func (r *result) CompleteAll(err error) {
	r.once.Do(func() {
		r.err = err
		close(r.done)
	})
}

func (r *result) wait() error {
	<-r.done
	return r.err
}
