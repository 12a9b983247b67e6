package engine

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// rdmaBind is a Binding on an RDMA endpoint: the local region registered
// and the peer's address resolved once, the work request built once, so
// that a Put is one post and a Get one post, and PutN/GetN post chains of
// them (one cgo call per chain) keeping up to rdmaBindWindow in flight.
//
// The caller waits for its own completions by polling the engine's CQ
// itself (CQ.TryProgress) for Config.WaitSpin, then sleeps until the CQ's
// goroutine delivers them: a ping-pong loop takes its completion and polls
// its memory on one goroutine, as perftest does, with no goroutine switch.
type rdmaBind struct {
	ep     *Endpoint
	cq     *rdma.CQ
	ref    rdma.MRRef // the local region, held until Close
	seg    rdma.Seg
	remote rdma.RemoteAddr
	inline bool // Puts small enough to be copied into the work request
	spin   time.Duration
	oneP   bool // GOMAXPROCS was 1 at Bind

	mu       sync.Mutex // one operation at a time
	chain    []rdma.WR  // rdmaBindWindow copies of the work request
	chainPut bool       // of a Put (else a Get)

	posted    uint64        // mu
	completed atomic.Uint64 // by Complete
	sig       chan struct{} // a completion arrived (capacity 1)
	errMu     sync.Mutex
	err       error       // the first failed work request's
	hasErr    atomic.Bool // err is set (read without errMu on every op)
}

// rdmaBindWindow is how many work requests a binding keeps in flight in
// PutN and GetN: the endpoint's send queue depth (other operations on the
// endpoint share it through its credits).
const rdmaBindWindow = rdmaMaxSend

func (ep *Endpoint) bindRDMA(local Slice, k *wire.RemoteKey) (*Binding, error) {
	e := ep.e
	if k.RKey == 0 {
		return nil, newErr(ErrNotSupported, "bindings need a remote key with an rkey (the peer's memory registered with its NIC); use Put/Get", nil)
	}
	if local.buf.loc.gaudi {
		return nil, newErr(ErrNotSupported, "RDMA bindings are from host memory (use Put/Get for Gaudi memory)", nil)
	}
	start, err := k.Span(0, k.Len)
	if err != nil {
		return nil, newErr(ErrInvalid, "remote key view", err)
	}
	if err := local.buf.acquire(); err != nil {
		return nil, err
	}
	addr := local.hostAddr()
	ref, err := e.rdma.mrs.Get(addr, local.n, rdma.AccessLocalWrite)
	if err != nil {
		local.buf.release()
		return nil, newErr(ErrNotSupported, "RDMA registration of local memory", err)
	}
	rb := &rdmaBind{
		ep: ep, cq: e.rdma.cq, ref: ref, seg: ref.Seg(addr, local.n),
		remote: rdma.RemoteAddr{Addr: k.Base + start, RKey: k.RKey},
		inline: local.n <= uint64(ep.rd.maxInline),
		spin:   e.cfg.WaitSpin,
		oneP:   runtime.GOMAXPROCS(0) == 1,
		sig:    make(chan struct{}, 1),
	}
	return &Binding{ep: ep, lbuf: local.buf, n: local.n, rd: rb}, nil
}

// Complete implements rdma.Completer (on whichever goroutine polled it).
func (rb *rdmaBind) Complete(c rdma.Completion) {
	rb.ep.rd.credits.put(1)
	if c.Err != nil {
		err := rb.ep.rdmaFailed(c.Op, c.Err)
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

func (rb *rdmaBind) failed() error {
	if !rb.hasErr.Load() {
		return nil
	}
	rb.errMu.Lock()
	defer rb.errMu.Unlock()
	return rb.err
}

// wr is the binding's work request for a Put (write) or a Get (read).
func (rb *rdmaBind) wr(put bool) rdma.WR {
	w := rdma.WR{Op: rdma.OpRead, Local: []rdma.Seg{rb.seg}, Remote: rb.remote, Done: rb}
	if put {
		w.Op, w.Inline = rdma.OpWrite, rb.inline
	}
	return w
}

// post posts k copies of the work request as one chain (mu held).
func (rb *rdmaBind) post(put bool, k int) error {
	if len(rb.chain) == 0 || rb.chainPut != put {
		rb.chain = rb.chain[:0]
		for range rdmaBindWindow {
			rb.chain = append(rb.chain, rb.wr(put))
		}
		rb.chainPut = put
	}
	n, err := rb.ep.rdmaPost(context.Background(), rb.ep.rd, rb.chain[:k], rb.cq)
	rb.posted += uint64(n)
	return err
}

// waitFor waits until all but at most left of the posted work requests
// have completed (mu and a CQ hold held): it polls the CQ itself for the
// spin time, then sleeps until the CQ's goroutine delivers.
func (rb *rdmaBind) waitFor(left uint64) error {
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

// do runs n Puts or Gets, keeping up to rdmaBindWindow in flight; with
// wait, it returns once all are done, else once all are posted.
func (rb *rdmaBind) do(put bool, n int, wait bool) error {
	if n <= 0 {
		return nil
	}
	total := n
	if err := rb.failed(); err != nil {
		return err
	}
	if err := rb.ep.Err(); err != nil {
		return err
	}
	// The completions of these posts are taken here (waitFor), not by
	// the CQ's goroutine, which no post then wakes; released with some
	// in flight (PutN), it takes them over.
	rb.cq.Hold()
	defer rb.cq.Release()
	for n > 0 {
		inFlight := rb.posted - rb.completed.Load()
		if inFlight >= rdmaBindWindow {
			if err := rb.waitFor(rdmaBindWindow - 1); err != nil {
				return err
			}
			continue
		}
		k := min(n, int(rdmaBindWindow-inFlight))
		if err := rb.post(put, k); err != nil {
			return err
		}
		n -= k
	}
	rb.ep.rd.zeroCopy.Add(uint64(total))
	if wait {
		return rb.waitFor(0)
	}
	return nil
}

// flush waits for every work request in flight (mu held).
func (rb *rdmaBind) flush() error {
	rb.cq.Hold()
	defer rb.cq.Release()
	return rb.waitFor(0)
}

// close waits for the work requests in flight and releases the region.
func (rb *rdmaBind) close() error {
	err := rb.flush()
	rb.ep.e.rdma.mrs.Put(rb.ref)
	return err
}
