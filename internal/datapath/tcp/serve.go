package tcp

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/gxfer/gxfer/wire"
)

// errPeerCanceled ends a transfer the peer abandoned (wire.Cancel).
var errPeerCanceled = errors.New("canceled by the peer")

// servePut starts landing a peer's Put (its bytes follow on the
// connection). It answers a refusal at once; the bytes are then dropped.
// r is the decoded message's: by address, as a copy would move to the
// heap (Lookup takes its key by address).
func (p *path) servePut(r *wire.Request) error {
	if p.c.Ours(r.RequestID) {
		return fmt.Errorf("Put with request id %d of our parity", r.RequestID)
	}
	in := &inbound{id: r.RequestID, n: r.Length}
	mine, st, msg := p.env.Lookup(&r.Key, r.Offset, r.Length, wire.KeyWrite)
	if st == wire.StatusOK {
		if err := mine.B.Acquire(); err != nil {
			st, msg = wire.StatusStale, "buffer no longer exported"
		}
	}
	if st != wire.StatusOK {
		in.discard = true
		in.onDone = discardDone{}
		if err := p.c.QueueReply(wire.NewError(r.RequestID, st, msg)); err != nil {
			return err
		}
	} else {
		in.dst, in.p = mine, p
		in.comp = wire.Completion{RequestID: r.RequestID, Status: wire.StatusOK}
		in.onDone = in
	}
	return p.startInbound(in)
}

// inboundDone is a served Put's inboundDone: putLanded.
func (in *inbound) inboundDone(err error) { in.putLanded(err) }

// putLanded answers a served Put whose bytes have landed (or failed to),
// releasing its buffer.
func (in *inbound) putLanded(err error) {
	in.dst.B.Release()
	in.p.answerLanded(in, &in.comp, 1, err)
}

// answerLanded queues the reply to a request whose bytes have landed (or
// failed to: an Error then), ok of its puts served, unless the peer
// canceled it.
func (p *path) answerLanded(in *inbound, ok wire.Message, served uint64, err error) {
	if in.quiet {
		return // the peer canceled it: no reply
	}
	rep := ok
	if err != nil {
		rep = wire.NewError(in.id, wire.StatusInternal, err.Error())
	} else {
		p.served.Add(served)
	}
	if p.c.Err() == nil {
		_ = p.c.QueueReply(rep)
	}
}

// startInbound waits for the bytes of in (or finishes it at once when it
// has none).
func (p *path) startInbound(in *inbound) error {
	if in.n == 0 {
		in.mu.Lock()
		fin := in.finishLocked()
		in.mu.Unlock()
		if fin {
			in.onDone.inboundDone(nil)
		}
		return nil
	}
	if err := p.addInbound(in); err != nil {
		in.cancel(err)
		return err
	}
	return nil
}

// serveGet answers a peer's Get with Data frames and a Completion, on
// a goroutine of its own (within the endpoint's limit of requests in
// progress; beyond it the Get is refused).
func (p *path) serveGet(r wire.Request) error {
	if p.c.Ours(r.RequestID) {
		return fmt.Errorf("Get with request id %d of our parity", r.RequestID)
	}
	stop := new(atomic.Bool) // the peer canceled it, or the connection failed
	p.mu.Lock()
	if _, dup := p.serving[r.RequestID]; dup {
		p.mu.Unlock()
		return fmt.Errorf("request id %d reused while in progress", r.RequestID)
	}
	p.serving[r.RequestID] = stop
	if p.failed != nil {
		stop.Store(true)
	}
	p.mu.Unlock()
	done := func() {
		p.mu.Lock()
		delete(p.serving, r.RequestID)
		p.mu.Unlock()
	}
	ok := p.c.Serve(func() wire.Message {
		defer done()
		mine, st, msg := p.env.Lookup(&r.Key, r.Offset, r.Length, wire.KeyRead)
		if st == wire.StatusOK {
			if err := mine.B.Acquire(); err != nil {
				st, msg = wire.StatusStale, "buffer no longer exported"
			}
		}
		if st != wire.StatusOK {
			return wire.NewError(r.RequestID, st, msg)
		}
		_, err := p.sendMem(nil, r.RequestID, 0, mine, nil, stop.Load)
		mine.B.Release()
		switch {
		case errors.Is(err, errStopped):
			// Canceled by the peer: nothing more for this request.
		case err == nil:
			p.served.Add(1)
			return &wire.Completion{RequestID: r.RequestID, Status: wire.StatusOK}
		case errors.Is(err, errSourceFailed):
			return wire.NewError(r.RequestID, wire.StatusInternal, err.Error())
		default:
			p.c.Fail(p.sendErr(err)) // the stream is broken or the peer gone
		}
		return nil
	})
	if !ok {
		done()
		return p.c.QueueReply(wire.NewError(r.RequestID, wire.StatusNoResources, "too many requests in progress"))
	}
	return nil
}

// serveCancel ends a request the peer abandoned: a Put landing here lands
// no more bytes, a Get served from here sends no more.
func (p *path) serveCancel(m *wire.Cancel) error {
	if p.c.Ours(m.RequestID) {
		return fmt.Errorf("Cancel of request %d, of our parity", m.RequestID)
	}
	p.mu.Lock()
	in := p.inbound[m.RequestID]
	stop := p.serving[m.RequestID]
	if in != nil {
		in.mu.Lock()
		if in.got != m.Sent {
			got := in.got
			in.mu.Unlock()
			p.mu.Unlock()
			return fmt.Errorf("%w: Cancel of request %d after %d bytes, %d landed", wire.ErrMalformed, m.RequestID, m.Sent, got)
		}
		in.quiet = true
		in.mu.Unlock()
		delete(p.inbound, m.RequestID)
	}
	p.mu.Unlock()
	if in != nil {
		in.cancel(errPeerCanceled)
	}
	if stop != nil {
		stop.Store(true)
	}
	// Neither: a request that ended before the Cancel came (a Get whose
	// last frame crossed it).
	return nil
}
