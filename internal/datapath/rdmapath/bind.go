package rdmapath

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// Bound is a binding on an RDMA endpoint: the local region registered
// and the peer's address resolved once, the work request built once, so
// that a Put is one post and a Get one post, and PutN/GetN post chains of
// them (one cgo call per chain) keeping up to bindWindow in flight.
//
// The caller waits for its own completions by polling the first NIC's CQ
// itself (CQ.TryProgress) for Config.WaitSpin, then sleeps until the CQ's
// goroutine delivers them: a ping-pong loop takes its completion and polls
// its memory on one goroutine, as perftest does, with no goroutine switch.
//
// The binding holds its local buffer (Acquire at Bind, Release at Close).
// Its methods are called one at a time (the engine's Binding serialises
// them).
type Bound struct {
	p      *Path
	cn     *conn
	local  datapath.Buf
	cq     *rdma.CQ
	ref    rdma.MRRef // the local region, held until Close
	seg    rdma.Seg
	remote rdma.RemoteAddr
	inline bool // Puts small enough to be copied into the work request
	spin   time.Duration
	oneP   bool // GOMAXPROCS was 1 at Bind

	mu       sync.Mutex        // one operation at a time
	chain    []rdma.WR         // bindWindow copies of the work request
	chainPut bool              // of a Put (else a Get)
	prep     [2]*rdma.Prepared // the work request of a Get [0] and a Put [1], posted alone
	closed   bool
	ended    error // closed by the endpoint's end: its error
	leftErr  error // closed by the endpoint's end: release's error, for Close

	posted    uint64        // mu
	completed atomic.Uint64 // by Complete
	sig       chan struct{} // a completion arrived (capacity 1)
	errMu     sync.Mutex
	err       error       // the first failed work request's
	hasErr    atomic.Bool // err is set (read without errMu on every op)
}

var _ datapath.Bound = (*Bound)(nil)

// bindWindow is how many work requests a binding keeps in flight in
// PutN and GetN: the endpoint's send queue depth (other operations on the
// endpoint share it through its credits).
const bindWindow = maxSend

// Bind binds local host memory to the peer memory k names (of the same
// length, granting read and write), which must carry an rkey.
func (p *Path) Bind(_ context.Context, local datapath.Mem, k wire.RemoteKey, _ *wire.RemoteKey, _ time.Time) (datapath.Bound, error) {
	if k.Len != local.Len {
		return nil, gxerr.New(gxerr.Invalid, fmt.Sprintf("length mismatch: local %d, remote %d", local.Len, k.Len), nil)
	}
	if k.Owner != p.c.PeerHello().EngineID {
		return nil, gxerr.New(gxerr.Invalid, "remote key belongs to another engine than "+p.c.Name(), nil)
	}
	if !k.Allows(wire.KeyRead | wire.KeyWrite) {
		return nil, gxerr.New(gxerr.Invalid, "remote key does not grant read and write access", nil)
	}
	if k.RKey == 0 {
		return nil, gxerr.New(gxerr.NotSupported, "bindings need a remote key with an rkey (the peer's memory registered with its NIC); use Put/Get", nil)
	}
	if local.IsGaudi() {
		return nil, gxerr.New(gxerr.NotSupported, "RDMA bindings are from host memory (use Put/Get for Gaudi memory)", nil)
	}
	start, err := k.Span(0, k.Len)
	if err != nil {
		return nil, gxerr.New(gxerr.Invalid, "remote key view", err)
	}
	if err := local.B.Acquire(); err != nil {
		return nil, err
	}
	cn := p.conns[0]
	addr := local.Addr()
	ref, err := cn.n.mrs.Get(addr, local.Len, rdma.AccessLocalWrite)
	if err != nil {
		local.B.Release()
		return nil, gxerr.New(gxerr.NotSupported, "RDMA registration of local memory", err)
	}
	rb := &Bound{
		p: p, cn: cn, local: local.B, cq: cn.n.cq, ref: ref, seg: ref.Seg(addr, local.Len),
		remote: rdma.RemoteAddr{Addr: k.Base + start, RKey: k.RKey},
		inline: local.Len <= uint64(cn.maxInline),
		spin:   p.env.Config().WaitSpin,
		oneP:   runtime.GOMAXPROCS(0) == 1,
		sig:    make(chan struct{}, 1),
	}
	if err := p.bounds.add(rb); err != nil {
		cn.n.mrs.Put(ref)
		local.B.Release()
		return nil, err
	}
	return rb, nil
}

// Complete implements rdma.Completer (on whichever goroutine polled it).
func (rb *Bound) Complete(c rdma.Completion) {
	rb.cn.put(1)
	if c.Err != nil {
		err := rb.p.wrFailed(c.Op, c.Err)
		rb.errMu.Lock()
		if rb.err == nil {
			rb.err = err
			rb.hasErr.Store(true)
		}
		rb.errMu.Unlock()
	}
	rb.completed.Add(1)
	select {
	case rb.sig <- struct{}{}:
	default:
	}
}

func (rb *Bound) failed() error {
	if !rb.hasErr.Load() {
		return nil
	}
	rb.errMu.Lock()
	defer rb.errMu.Unlock()
	return rb.err
}

// wr is the binding's work request for a Put (write) or a Get (read).
func (rb *Bound) wr(put bool) rdma.WR {
	w := rdma.WR{Op: rdma.OpRead, Local: []rdma.Seg{rb.seg}, Remote: rb.remote, Done: rb}
	if put {
		w.Op, w.Inline = rdma.OpWrite, rb.inline
	}
	return w
}

// post posts k copies of the work request as one chain (mu held).
func (rb *Bound) post(put bool, k int) error {
	if k == 1 {
		return rb.postOne(put)
	}
	if len(rb.chain) == 0 || rb.chainPut != put {
		rb.chain = rb.chain[:0]
		for range bindWindow {
			rb.chain = append(rb.chain, rb.wr(put))
		}
		rb.chainPut = put
	}
	n, err := rb.p.post(context.Background(), rb.cn, rb.chain[:k], rb.cq)
	rb.posted += uint64(n)
	if put && n > 0 {
		rb.cn.noteWrite(rb.remote, rb.seg.Len)
	}
	return err
}

// postOne posts the work request once (mu held): a Put's or Get's one
// write or read, checked and built at its first post only.
func (rb *Bound) postOne(put bool) error {
	i := 0
	if put {
		i = 1
	}
	w := rb.prep[i]
	if w == nil {
		var err error
		if w, err = rb.cn.qp.Prepare(rb.wr(put)); err != nil {
			return rb.p.postErr(err)
		}
		rb.prep[i] = w
	}
	if err := rb.p.postPrepared(context.Background(), rb.cn, w, rb.cq); err != nil {
		return err
	}
	rb.posted++
	if put {
		rb.cn.noteWrite(rb.remote, rb.seg.Len)
	}
	return nil
}

// waitFor waits until all but at most left of the posted work requests
// have completed (mu and a CQ hold held): it polls the CQ itself for the
// spin time, then sleeps until the CQ's goroutine delivers.
func (rb *Bound) waitFor(left uint64) error {
	want := rb.posted - min(left, rb.posted)
	if rb.completed.Load() >= want {
		return rb.failed()
	}
	var start time.Time
	for spins := 0; rb.completed.Load() < want; spins++ {
		n, polled := rb.cq.TryProgress()
		if n > 0 {
			continue
		}
		if !polled && rb.oneP {
			// The CQ's goroutine is polling: it may be preempted on
			// this P, holding the CQ. (Yielding costs a clock read in
			// the scheduler, and with more Ps it wakes an idle one:
			// only when needed.)
			runtime.Gosched()
		}
		if spins&255 != 255 {
			continue
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > rb.spin {
			break
		}
	}
	// Every posted work request completes, the QP's Close flushing them
	// if need be: no other wake-up is needed. Released, the CQ's
	// goroutine delivers them (see rdma.CQ.Hold).
	if rb.completed.Load() < want {
		rb.cq.Release()
		for rb.completed.Load() < want {
			<-rb.sig
		}
		rb.cq.Hold()
	}
	return rb.failed()
}

// do runs n Puts or Gets, keeping up to bindWindow in flight; with
// wait, it returns once all are done, else once all are posted.
func (rb *Bound) do(put bool, n int, wait bool) error {
	if n <= 0 {
		return nil
	}
	total := n
	if err := rb.failed(); err != nil {
		return err
	}
	if err := rb.p.c.Err(); err != nil {
		return err
	}
	// The completions of these posts are taken here (waitFor), not by
	// the CQ's goroutine, which no post then wakes; released with some
	// in flight (PutN), it takes them over.
	rb.cq.Hold()
	defer rb.cq.Release()
	for n > 0 {
		inFlight := rb.posted - rb.completed.Load()
		if inFlight >= bindWindow {
			if err := rb.waitFor(bindWindow - 1); err != nil {
				return err
			}
			continue
		}
		k := min(n, int(bindWindow-inFlight))
		if err := rb.post(put, k); err != nil {
			return err
		}
		n -= k
	}
	rb.p.zeroCopy.Add(uint64(total))
	if wait {
		return rb.waitFor(0)
	}
	return nil
}

// flush waits for every work request in flight (mu held).
func (rb *Bound) flush() error {
	rb.cq.Hold()
	defer rb.cq.Release()
	return rb.waitFor(0)
}

// close waits for the work requests in flight and releases the region.
func (rb *Bound) close() error {
	err := rb.flush()
	for i, w := range rb.prep {
		w.Free()
		rb.prep[i] = nil
	}
	rb.cn.n.mrs.Put(rb.ref)
	return err
}

// Do runs n Puts (put) or Gets; with wait it returns once they are done,
// else once they are posted (up to bindWindow left in flight).
func (rb *Bound) Do(put bool, n int, wait bool) error {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.closed {
		return rb.closedErr()
	}
	return rb.do(put, n, wait)
}

// Flush waits for every work request in flight, returning the first
// failure among the binding's.
func (rb *Bound) Flush() error {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.closed {
		return rb.closedErr()
	}
	return rb.flush()
}

// Close waits for the work requests in flight, releases the region and
// the local buffer. Idempotent; its error is a work request's.
func (rb *Bound) Close() error {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.closed {
		// Closed by the endpoint's end: the first Close still reports
		// what the work requests left in flight then failed with.
		err := rb.leftErr
		rb.leftErr = nil
		return err
	}
	rb.p.bounds.remove(rb)
	return rb.release(nil)
}

// release (mu held) closes rb: it waits for the work requests in flight
// and releases the region and the local buffer; later calls fail with
// ended, or ErrClosed if nil.
func (rb *Bound) release(ended error) error {
	rb.closed, rb.ended = true, ended
	err := rb.close()
	rb.local.Release()
	return err
}

// closedErr is what a call on a closed binding returns (mu held).
func (rb *Bound) closedErr() error {
	if rb.ended != nil {
		return rb.ended
	}
	return gxerr.New(gxerr.Closed, "binding closed", nil)
}

// Inline is false: the operations are RDMA writes and reads.
func (rb *Bound) Inline() bool { return false }

// InlineWrites reports whether Puts carry their data in the work request
// (tests).
func (rb *Bound) InlineWrites() bool { return rb.inline }

// InFlight is the work requests posted and not yet completed (tests).
func (rb *Bound) InFlight() uint64 {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return rb.posted - rb.completed.Load()
}
