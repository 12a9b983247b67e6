package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// The RDMA data path. The control channel stays the TCP connection
// (requests, completions, heartbeats); after the Hello exchange each side
// creates an RC queue pair and the two swap their endpoints in
// RDMAConnect messages (the dialer first).
//
// A Put into (Get from) a peer buffer whose key carries an rkey is one
// RDMA write (read) from (into) local memory, completed by the CQ: the
// peer's CPU takes no part. Local host memory is registered through the
// engine's MR cache; local Gaudi memory through its DMA-BUF where the NIC
// can (ibv_reg_dmabuf_mr), else it is staged through pinned host buffers
// by the Gaudi DMA engine, pipelined (the DMA of chunk k+1 overlaps the
// RDMA of chunk k). A peer buffer without an rkey (its Gaudi memory, when
// its NIC cannot register DMA-BUFs) is reached by a request on the control
// channel naming a registered host region of the requester (LocalRDMA):
// the owner validates it like every request and moves the data with RDMA
// reads or writes against that region through its own staging, then
// answers.

// rdmaConn is an endpoint's queue pair on one NIC. The endpoint holds
// the one on its first NIC, whose nics lists every one (itself first).
type rdmaConn struct {
	r         *rdmaCtx
	qp        *rdma.QP
	maxInline int         // bytes a write may carry in its work request
	credits   sendCredits // work requests in flight (send queue depth)
	once      sync.Once
	nics      []*rdmaConn // on the first NIC's: the endpoint's queue pairs, by NIC

	wrs                                     atomic.Uint64 // work requests posted on this NIC
	zeroCopy, staged, delegated, servedRDMA atomic.Uint64
}

// newConn creates a queue pair taking rdmaMaxInline bytes of inline data
// in its writes (small writes then need no DMA read of their source), or
// none where the device refuses that.
func (r *rdmaCtx) newConn() (*rdmaConn, error) {
	cfg := rdma.QPConfig{
		SendCQ: r.cq, MaxSend: rdmaMaxSend, MaxRecv: 1, MaxSendSGE: 1, MaxRecvSGE: 1,
		Port: r.port, GIDIndex: r.gidIndex, MaxInline: rdmaMaxInline,
	}
	qp, err := r.pd.NewQP(cfg)
	if err != nil {
		cfg.MaxInline = 0
		if qp, err = r.pd.NewQP(cfg); err != nil {
			return nil, err
		}
	}
	r.qps.Add(1)
	return &rdmaConn{r: r, qp: qp, maxInline: cfg.MaxInline, credits: newSendCredits(rdmaMaxSend)}, nil
}

// close destroys the queue pair once its outstanding work requests have
// completed (flushed), and the endpoint's others on the first NIC's.
func (rd *rdmaConn) close() {
	for _, o := range rd.nics[1:] {
		o.close()
	}
	rd.once.Do(func() {
		_ = rd.qp.Close()
		rd.r.qps.Done()
	})
}

// setError moves every queue pair of the endpoint to the error state:
// what is in flight completes with flush errors.
func (rd *rdmaConn) setError() {
	for _, o := range rd.nics {
		_ = o.qp.SetError()
	}
}

func toWireEndpoint(ep rdma.Endpoint, nic, nics int) wire.RDMAConnect {
	return wire.RDMAConnect{QPN: ep.QPN, PSN: ep.PSN, LID: ep.LID, MTU: uint8(ep.MTU), NIC: uint8(nic), NICs: uint8(nics), GID: ep.GID}
}

func fromWireEndpoint(m *wire.RDMAConnect) rdma.Endpoint {
	return rdma.Endpoint{QPN: m.QPN, PSN: m.PSN, LID: m.LID, MTU: rdma.MTU(m.MTU), GID: m.GID}
}

// rdmaConnect brings up the endpoint's queue pairs over the control
// connection, right after the Hello exchange: the dialer sends an
// RDMAConnect for each of its NICs, the acceptor connects a queue pair on
// each NIC both sides have to the dialer's of the same index and answers
// with those, and the dialer connects the same ones (closing the rest).
// It returns the first NIC's, which lists them all.
func (e *Engine) rdmaConnect(ctx context.Context, wc *wire.Conn, dialer bool) (_ *rdmaConn, err error) {
	refuse := func(err error) error {
		if !dialer {
			_ = wc.Send(wire.NewError(0, wire.StatusNoResources, "RDMA queue pair: "+err.Error()))
		}
		return fmt.Errorf("RDMA queue pair: %w", err)
	}
	var conns []*rdmaConn
	defer func() {
		if err != nil {
			for _, c := range conns {
				c.close()
			}
		}
	}()
	// open creates queue pairs on the first n NICs.
	open := func(n int) error {
		for _, r := range e.nics[:n] {
			c, err := r.newConn()
			if err != nil {
				return err
			}
			c.nics = []*rdmaConn{c}
			conns = append(conns, c)
		}
		return nil
	}
	send := func() error {
		for i, c := range conns {
			m := toWireEndpoint(c.qp.Endpoint(), i, len(conns))
			if err := wc.Send(&m); err != nil {
				return err
			}
		}
		return nil
	}
	if dialer {
		if err := open(len(e.nics)); err != nil {
			return nil, refuse(err)
		}
		if err := send(); err != nil {
			return nil, err
		}
	}
	peer, err := recvRDMAConnects(ctx, wc)
	if err != nil {
		return nil, err
	}
	if dialer {
		if len(peer) > len(conns) {
			return nil, fmt.Errorf("RDMA: the peer answered for %d NICs, %d offered", len(peer), len(conns))
		}
		for _, c := range conns[len(peer):] {
			c.close()
		}
		conns = conns[:len(peer)]
	} else if err := open(min(len(peer), len(e.nics))); err != nil {
		return nil, refuse(err)
	}
	for i, c := range conns {
		if err := c.qp.Connect(fromWireEndpoint(&peer[i])); err != nil {
			return nil, refuse(err)
		}
	}
	if !dialer {
		if err := send(); err != nil {
			return nil, err
		}
	}
	conns[0].nics = conns
	return conns[0], nil
}

// recvRDMAConnects receives the peer's RDMAConnect messages: one per NIC,
// in order, all naming the same count (or the peer's error).
func recvRDMAConnects(ctx context.Context, wc *wire.Conn) ([]wire.RDMAConnect, error) {
	var out []wire.RDMAConnect
	for {
		f, err := wc.Recv(ctx)
		if err != nil {
			return nil, err
		}
		var m wire.RDMAConnect
		if err := decodeOrPeerError(&f, &m); err != nil {
			return nil, err
		}
		if int(m.NIC) != len(out) || (len(out) > 0 && m.NICs != out[0].NICs) {
			return nil, fmt.Errorf("RDMA: the peer's RDMAConnect for NIC %d of %d came after %d", m.NIC, m.NICs, len(out))
		}
		out = append(out, m)
		if len(out) == int(m.NICs) {
			return out, nil
		}
	}
}

// rdmaPost posts wrs on the queue pair rd, taking a send-queue credit for
// each (waiting while the queue is full). It returns how many were
// posted. A caller holding the CQ (rdma.CQ.Hold) passes it as held: the
// hold is let go while it waits for credits, which only completions
// return.
func (ep *Endpoint) rdmaPost(ctx context.Context, rd *rdmaConn, wrs []rdma.WR, held *rdma.CQ) (int, error) {
	for i := range wrs {
		if rd.credits.tryTake() {
			continue
		}
		if held != nil {
			held.Release()
		}
		err := rd.credits.take(ctx, ep.done)
		if held != nil {
			held.Hold()
		}
		if err != nil {
			rd.credits.put(i)
			if err == errCreditsDone {
				return 0, ep.Err()
			}
			return 0, ctxErr(ep.name+": waiting for RDMA send credits", err)
		}
	}
	n, err := rd.qp.Post(wrs)
	rd.wrs.Add(uint64(n))
	if n < len(wrs) {
		rd.credits.put(len(wrs) - n)
	}
	if err != nil {
		if f := ep.Err(); f != nil {
			return n, f
		}
		switch {
		case errors.Is(err, rdma.ErrClosed):
			err = newErr(ErrClosed, ep.name+": RDMA queue pair closed", err)
		case errors.Is(err, rdma.ErrQueueFull):
			err = newErr(ErrQueueFull, ep.name+": RDMA", err)
		default:
			err = ep.peerErr("RDMA post", err)
		}
	}
	return n, err
}

// rdmaFailed is the error of a failed work request: the queue pair is in
// the error state, so the endpoint fails (once) with ErrPeer naming the
// peer, and every operation still in flight on it ends with that error.
func (ep *Endpoint) rdmaFailed(op rdma.OpKind, err error) error {
	if f := ep.Err(); f != nil {
		return f
	}
	ep.fail(ep.peerErr(op.String()+" failed", err))
	return ep.Err()
}

// checkQP fails the endpoint if its queue pair is in the error state
// (with nothing in flight, no completion would tell): operations waiting
// on the peer then end at once. Called at every heartbeat.
func (ep *Endpoint) checkQP() {
	if ep.rd == nil || ep.Err() != nil {
		return
	}
	for _, rd := range ep.rd.nics {
		if st, err := rd.qp.State(); err == nil && st == rdma.QPStateError {
			ep.fail(ep.peerErr(fmt.Sprintf("RDMA queue pair on %s in the error state", rd.r.dev.Name()), nil))
			return
		}
	}
}

// rdmaOp is the part of a transfer carried by one NIC's queue pair: one
// or more work requests between local registered memory and a peer
// region; the CQ completes it. Its transfer's future resolves when every
// part has finished.
type rdmaOp struct {
	x     *rdmaXfer
	rd    *rdmaConn
	local Slice
	ref   rdma.MRRef // local host memory's region (zero for a DMA-BUF region)
	left  atomic.Int32
	mu    sync.Mutex
	err   error
}

// rdmaXfer is a transfer of one or more parts (rdmaOp).
type rdmaXfer struct {
	ep    *Endpoint
	f     *Future     // NewFuture(parts)
	timer *time.Timer // the deadline's (nil without one)
	parts atomic.Int32
}

func (o *rdmaOp) setErr(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
}

// Complete runs on whichever goroutine polled the CQ.
func (o *rdmaOp) Complete(c rdma.Completion) {
	o.rd.credits.put(1)
	if c.Err != nil {
		o.setErr(o.x.ep.rdmaFailed(c.Op, c.Err))
	}
	if o.left.Add(-1) == 0 {
		o.finish()
	}
}

func (o *rdmaOp) finish() {
	if !o.ref.IsZero() {
		o.rd.r.mrs.Put(o.ref)
	}
	o.local.buf.release()
	o.mu.Lock()
	err := o.err
	o.mu.Unlock()
	o.x.partDone(err)
}

// partDone ends one part of the transfer; the last stops the deadline's
// timer.
func (x *rdmaXfer) partDone(err error) {
	if x.parts.Add(-1) == 0 && x.timer != nil {
		x.timer.Stop()
	}
	x.f.complete(0, err)
}

// rdmaDirect writes local to remote (toRemote) or reads remote into local
// with RDMA, straight from and into local's memory: host memory through
// the MR cache, Gaudi memory through its DMA-BUF region (the caller has
// checked it exists). remote.RKey is the peer region's on its first NIC;
// nicRKeys[i], when not 0, the same region's on its NIC i+1: a transfer
// of host memory of at least rdmaSliceMin bytes is then split over the
// NICs both sides have, in slices aligned to rdmaSliceAlign.
func (ep *Endpoint) rdmaDirect(ctx context.Context, toRemote bool, local Slice, remote rdma.RemoteAddr, nicRKeys []uint32, deadline time.Time) *Future {
	// On the stack: no allocation for a transfer of one part.
	var rkeyBuf [wire.MaxNICs]uint32
	var partBuf [wire.MaxNICs]rdma.Slice
	rkeys := append(rkeyBuf[:0], remote.RKey)
	if !local.buf.loc.gaudi {
		rkeys = ep.nicRKeys(rkeys, local.n, nicRKeys)
	}
	parts := append(partBuf[:0], rdma.Slice{Len: local.n})
	if len(rkeys) > 1 {
		var err error
		if parts, err = rdma.AppendSplit(partBuf[:0], local.n, len(rkeys), rdmaSliceAlign); err != nil {
			return resolved(newErr(ErrInvalid, "RDMA slices", err))
		}
	}
	x := &rdmaXfer{ep: ep, f: newFuture(len(parts))}
	x.f.setSpin(ep.e.cfg.WaitSpin)
	x.parts.Store(int32(len(parts)))
	x.timer = ep.deadlineTimer(x.f, deadline)
	for _, sl := range parts {
		part := local.buf.Slice(int(local.off+sl.Off), int(sl.Len))
		ep.rdmaPart(ctx, x, ep.rd.nics[sl.NIC], toRemote, part, rdma.RemoteAddr{Addr: remote.Addr + sl.Off, RKey: rkeys[sl.NIC]})
	}
	return x.f
}

// nicRKeys appends to rkeys (the peer region's rkey on its first NIC) the
// region's rkeys on the further NICs that a transfer of n bytes spreads
// over: none below rdmaSliceMin, else those both sides have (nicRKeys[i]
// is the rkey on the peer's NIC i+1, 0 where it has none).
func (ep *Endpoint) nicRKeys(rkeys []uint32, n uint64, nicRKeys []uint32) []uint32 {
	if n < rdmaSliceMin {
		return rkeys
	}
	for i, k := range nicRKeys {
		if k == 0 || i+1 >= len(ep.rd.nics) {
			break
		}
		rkeys = append(rkeys, k)
	}
	return rkeys
}

// rdmaPart posts one part of x on the queue pair rd; its result reaches
// x's future.
func (ep *Endpoint) rdmaPart(ctx context.Context, x *rdmaXfer, rd *rdmaConn, toRemote bool, local Slice, remote rdma.RemoteAddr) {
	if err := local.buf.acquire(); err != nil {
		x.partDone(err)
		return
	}
	o := &rdmaOp{x: x, rd: rd, local: local}
	var seg func(off, m uint64) rdma.Seg
	if local.buf.loc.gaudi {
		mr, err := rd.r.gaudiMR(local.buf)
		if err != nil {
			local.buf.release()
			x.partDone(err)
			return
		}
		seg = func(off, m uint64) rdma.Seg { return mr.Seg(local.off+off, m) }
	} else {
		addr := local.hostAddr()
		ref, err := rd.r.mrs.Get(addr, local.n, rdma.AccessLocalWrite)
		if err != nil {
			local.buf.release()
			x.partDone(newErr(ErrNotSupported, "RDMA registration of local memory", err))
			return
		}
		o.ref = ref
		seg = func(off, m uint64) rdma.Seg { return ref.Seg(addr+off, m) }
	}
	op := rdma.OpRead
	if toRemote {
		op = rdma.OpWrite
	}
	nwr := int((local.n + rdmaMaxWR - 1) / rdmaMaxWR)
	wrs := make([]rdma.WR, nwr)
	for i := range wrs {
		off := uint64(i) * rdmaMaxWR
		m := min(rdmaMaxWR, local.n-off)
		wrs[i] = rdma.WR{Op: op, Local: []rdma.Seg{seg(off, m)}, Remote: rdma.RemoteAddr{Addr: remote.Addr + off, RKey: remote.RKey}, Done: o,
			Inline: toRemote && !local.buf.loc.gaudi && m <= uint64(rd.maxInline)}
	}
	o.left.Store(int32(nwr))
	posted, err := ep.rdmaPost(ctx, rd, wrs, nil)
	if err != nil {
		o.setErr(err)
		if o.left.Add(-int32(nwr-posted)) == 0 {
			o.finish()
		}
	}
}

// rdmaOne posts one work request on the queue pair rd; the channel yields
// its result.
func (ep *Endpoint) rdmaOne(ctx context.Context, rd *rdmaConn, op rdma.OpKind, seg rdma.Seg, remote rdma.RemoteAddr) chan error {
	ch := make(chan error, 1)
	done := rdma.CompleterFunc(func(c rdma.Completion) {
		rd.credits.put(1)
		if c.Err != nil {
			ch <- ep.rdmaFailed(c.Op, c.Err)
			return
		}
		ch <- nil
	})
	if _, err := ep.rdmaPost(ctx, rd, []rdma.WR{{Op: op, Local: []rdma.Seg{seg}, Remote: remote, Done: done}}, nil); err != nil {
		ch <- err
	}
	return ch
}

// rdmaStaged moves Gaudi memory g to the peer region at remote (toRemote:
// DMA into a pinned host chunk, RDMA write) or the region into g (RDMA
// read into a host chunk, DMA to the device), through two staging buffers
// so that the DMA of one chunk overlaps the RDMA of the other. Chunk i
// goes over NIC i mod k, for the k NICs a transfer of its size spreads
// over (see nicRKeys).
func (ep *Endpoint) rdmaStaged(opCtx context.Context, toRemote bool, g Slice, remote rdma.RemoteAddr, nicRKeys []uint32) (err error) {
	e := ep.e
	n := g.n
	var (
		stage   [2]*Buffer
		ref     [2][wire.MaxNICs]rdma.MRRef // a staging buffer's region on each NIC, made on first use
		dmaF    [2]*Future
		net     [2]chan error
		rkeyBuf [wire.MaxNICs]uint32
	)
	rkeys := ep.nicRKeys(append(rkeyBuf[:0], remote.RKey), n, nicRKeys)
	ctx := context.Background()
	waitNet := func(k int) error {
		if net[k] == nil {
			return nil
		}
		err := <-net[k]
		net[k] = nil
		return err
	}
	waitDMA := func(k int) error {
		if dmaF[k] == nil {
			return nil
		}
		err := dmaF[k].Wait(ctx)
		dmaF[k] = nil
		return err
	}
	// Each transfer takes two staging buffers: bound the transfers so that
	// none waits for a second buffer while others hold them all.
	select {
	case e.rdmaStageSem <- struct{}{}:
	case <-ep.done:
		return ep.Err()
	case <-opCtx.Done():
		return ctxErr(ep.name+": waiting for RDMA staging", opCtx.Err())
	}
	defer func() { <-e.rdmaStageSem }()
	defer func() {
		for k := range stage {
			if e1 := waitNet(k); err == nil {
				err = e1
			}
			if e2 := waitDMA(k); err == nil {
				err = e2
			}
			if stage[k] != nil {
				for nic, rf := range ref[k] {
					if !rf.IsZero() {
						ep.rd.nics[nic].r.mrs.Put(rf)
					}
				}
				e.rdmaStage.put(stage[k])
			}
		}
	}()
	for k := range stage {
		if uint64(k)*rdmaChunk >= n {
			break
		}
		b, err := e.rdmaStage.get(opCtx, ep.done)
		if err != nil {
			if f := ep.Err(); f != nil {
				return f
			}
			return err
		}
		stage[k] = b
	}
	// one posts chunk i (at off, in staging buffer k) over its NIC.
	one := func(op rdma.OpKind, i, k int, off uint64) (chan error, error) {
		nic := i % len(rkeys)
		rd := ep.rd.nics[nic]
		if ref[k][nic].IsZero() {
			rf, err := rd.r.mrs.Get(stage[k].Addr(), rdmaChunk, rdma.AccessLocalWrite)
			if err != nil {
				return nil, newErr(ErrNotSupported, "RDMA registration of a staging buffer", err)
			}
			ref[k][nic] = rf
		}
		seg := ref[k][nic].Seg(stage[k].Addr(), min(rdmaChunk, n-off))
		return ep.rdmaOne(opCtx, rd, op, seg, rdma.RemoteAddr{Addr: remote.Addr + off, RKey: rkeys[nic]}), nil
	}
	dev := func(off, m uint64) Slice { return g.buf.Slice(int(g.off+off), int(m)) }
	chunk := func(off uint64) uint64 { return min(rdmaChunk, n-off) }
	if toRemote {
		fetch := func(k int, off uint64) {
			dmaF[k] = e.copyInternal(stage[k].Slice(0, int(chunk(off))), dev(off, chunk(off)), time.Time{})
		}
		fetch(0, 0)
		for i, off := 0, uint64(0); off < n; i, off = i+1, off+rdmaChunk {
			k := i & 1
			if err := opCtx.Err(); err != nil { // no further chunk: the deferred waits drain those started
				return ctxErr(ep.name+": RDMA staging stopped", err)
			}
			if err := waitDMA(k); err != nil {
				return err
			}
			if next := off + rdmaChunk; next < n {
				if err := waitNet(k ^ 1); err != nil {
					return err
				}
				fetch(k^1, next)
			}
			if net[k], err = one(rdma.OpWrite, i, k, off); err != nil {
				return err
			}
		}
		return nil
	}
	if net[0], err = one(rdma.OpRead, 0, 0, 0); err != nil {
		return err
	}
	for i, off := 0, uint64(0); off < n; i, off = i+1, off+rdmaChunk {
		k := i & 1
		if err := waitNet(k); err != nil {
			return err
		}
		if err := opCtx.Err(); err != nil {
			return ctxErr(ep.name+": RDMA staging stopped", err)
		}
		if next := off + rdmaChunk; next < n {
			if err := waitDMA(k ^ 1); err != nil {
				return err
			}
			if net[k^1], err = one(rdma.OpRead, i+1, k^1, next); err != nil {
				return err
			}
		}
		dmaF[k] = e.copyInternal(dev(off, chunk(off)), stage[k].Slice(0, int(chunk(off))), time.Time{})
	}
	return nil
}

// rdmaMove is rdmaDirect or rdmaStaged, whichever local's memory needs,
// as a future.
// (nicRKeys: see rdmaDirect.)
func (ep *Endpoint) rdmaMove(ctx context.Context, toRemote bool, local Slice, remote rdma.RemoteAddr, nicRKeys []uint32, deadline time.Time) (*Future, bool) {
	if local.buf.loc.gaudi {
		if _, err := ep.e.rdma.gaudiMR(local.buf); err != nil {
			return ep.goAsync(ctx, local, deadline, func() error { return ep.rdmaStaged(ctx, toRemote, local, remote, nicRKeys) }), true
		}
	}
	return ep.rdmaDirect(ctx, toRemote, local, remote, nicRKeys, deadline), false
}

// deadlineTimer ends f with ErrTimeout at deadline (nil timer without
// one). The operation goes on: its buffers stay referenced until the NIC
// and the DMA engine are done with them, and the destination's content is
// undefined (see ErrTimeout).
func (ep *Endpoint) deadlineTimer(f *Future, deadline time.Time) *time.Timer {
	if deadline.IsZero() {
		return nil
	}
	return time.AfterFunc(time.Until(deadline), func() {
		f.completeAll(newErr(ErrTimeout, ep.name+": RDMA operation", nil))
	})
}

// goAsync runs fn on a goroutine (holding local's buffer) and resolves
// the future with its result, or with ErrTimeout at deadline (fn goes on,
// holding the buffer).
func (ep *Endpoint) goAsync(ctx context.Context, local Slice, deadline time.Time, fn func() error) *Future {
	e := ep.e
	if err := local.buf.acquire(); err != nil {
		return resolved(err)
	}
	f := newFuture(1)
	f.setSpin(e.cfg.WaitSpin)
	timer := ep.deadlineTimer(f, deadline)
	e.async.Add(1)
	go func() {
		defer e.async.Done()
		if timer != nil {
			defer timer.Stop()
		}
		defer local.buf.release()
		select {
		case e.rmaSem <- struct{}{}:
		case <-ctx.Done():
			f.complete(0, ctxErr(ep.name+": waiting for a transfer slot", ctx.Err()))
			return
		}
		defer func() { <-e.rmaSem }()
		f.complete(0, fn())
	}()
	return f
}

// rmaRDMA runs a Put or Get on an RDMA endpoint.
func (ep *Endpoint) rmaRDMA(ctx context.Context, put bool, local Slice, k wire.RemoteKey, opts []OpOption) *Future {
	deadline := ep.e.opConfig(opts).deadline
	if k.RKey != 0 {
		start, err := k.Span(0, k.Len)
		if err != nil {
			return resolved(newErr(ErrInvalid, "remote key view", err))
		}
		f, staged := ep.rdmaMove(ctx, put, local, rdma.RemoteAddr{Addr: k.Base + start, RKey: k.RKey}, k.NICRKeys[:], deadline)
		if staged {
			ep.rd.staged.Add(1)
		} else {
			ep.rd.zeroCopy.Add(1)
		}
		return f
	}
	ep.rd.delegated.Add(1)
	// The deadline ends the future, not the request: the region the owner
	// is moving data against stays registered until it answers (or the
	// endpoint fails), so that a late transfer meets memory it may still
	// reach instead of an access error that would fail the endpoint. An
	// owner silent for PeerTimeout past the deadline fails the endpoint
	// (rdmaDelegate).
	return ep.goAsync(ctx, local, deadline, func() error { return ep.rdmaDelegate(put, local, k, deadline) })
}

// rdmaDelegate asks the owner of k to move the data itself, with RDMA
// against a registered host region of ours: local's own memory (host), or
// a host bounce buffer (Gaudi). It returns once the owner has answered.
// With a deadline, an owner that has not answered PeerTimeout after it
// (alive, its heartbeats coming, but stuck) fails the endpoint: its queue
// pairs in the error state, the peer can no longer reach the region,
// which is then deregistered; the request does not hold it for ever.
func (ep *Endpoint) rdmaDelegate(put bool, local Slice, k wire.RemoteKey, deadline time.Time) error {
	e := ep.e
	ctx := context.Background()
	if pt := e.cfg.PeerTimeout; !deadline.IsZero() && pt > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(pt))
		defer cancel()
	}
	return e.throughHost(ctx, put, local, local.buf.loc.gaudi, func(region Slice) error {
		// The owner reaches this region by RDMA with the rkey it is sent: a
		// registration of its own, not the cache's, deregistered once the
		// request is over, so that the peer's access ends with it.
		mr, err := e.rdma.pd.Register(region.hostBytes(), rdma.AccessDefault)
		if err != nil {
			return newErr(ErrNotSupported, "RDMA registration of local memory", err)
		}
		defer mr.Close()
		req := wire.Request{RequestID: ep.newID(), Key: k, Length: local.n,
			Local: wire.Local{Kind: wire.LocalRDMA, Addr: mr.Addr(), RKey: mr.RKey()}}
		err = ep.request(ctx, put, req)
		if errors.Is(err, ErrTimeout) {
			ep.fail(ep.peerErr(fmt.Sprintf("no answer to delegated RDMA request %d within its deadline and PeerTimeout (%v)", req.RequestID, e.cfg.PeerTimeout), nil))
		}
		return err
	})
}

// serveRDMA performs a peer's LocalRDMA request on one of our buffers, off
// the reader goroutine, and answers it.
func (ep *Endpoint) serveRDMA(put bool, r wire.Request) error {
	if ep.ours(r.RequestID) {
		return fmt.Errorf("request id %d of our parity", r.RequestID)
	}
	select {
	case ep.sem <- struct{}{}:
	default:
		return ep.queueReply(wire.NewError(r.RequestID, wire.StatusNoResources, "too many requests in progress"))
	}
	ep.serving.Add(1)
	ep.e.async.Add(1)
	go func() {
		defer ep.e.async.Done()
		defer ep.serving.Done()
		defer func() { <-ep.sem }()
		if h := ep.e.serveRDMAHook; h != nil {
			h() // tests: a stuck owner
		}
		var rep wire.Message = &wire.Completion{RequestID: r.RequestID, Status: wire.StatusOK}
		if st, msg := ep.serveRDMARequest(put, r); st != wire.StatusOK {
			rep = wire.NewError(r.RequestID, st, msg)
		} else {
			ep.served.Add(1)
			ep.rd.servedRDMA.Add(1)
		}
		if ep.Err() == nil {
			if err := ep.c.Send(rep); err != nil {
				ep.e.log.Debug().Err(err).Msg("reply not sent")
			}
		}
	}()
	return nil
}

func (ep *Endpoint) serveRDMARequest(put bool, r wire.Request) (wire.Status, string) {
	need := wire.KeyRead
	if put {
		need = wire.KeyWrite
	}
	mine, st, msg := ep.e.lookupKey(&r.Key, r.Offset, r.Length, need)
	if st != wire.StatusOK {
		return st, msg
	}
	if r.Length == 0 {
		return wire.StatusOK, ""
	}
	if err := mine.buf.acquire(); err != nil {
		return wire.StatusStale, "buffer no longer exported"
	}
	defer mine.buf.release()
	// A Put reads the requester's region into our memory; a Get writes it.
	f, _ := ep.rdmaMove(context.Background(), !put, mine, rdma.RemoteAddr{Addr: r.Local.Addr, RKey: r.Local.RKey}, nil, time.Time{})
	<-f.Done()
	if err := f.Err(); err != nil {
		return wire.StatusInternal, err.Error()
	}
	return wire.StatusOK, ""
}
