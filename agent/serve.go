package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gxfer/gxfer/engine"
)

// inbound is an endpoint a peer opened to this agent: the peer's hello and
// metadata requests, its notifications, and the peer's Puts and Gets (the
// engine serves those).
type inbound struct {
	ep   *engine.Endpoint
	name string // the peer's, after its hello
	inc  uint64
}

// errUnreached: the peer could not be reached (nothing was sent).
var errUnreached = errors.New("agent: peer not reached")

// Notification is a message a peer sent (Notify, or WithNotify after the
// data of a transfer).
type Notification struct {
	From        string // the sender's name
	Incarnation uint64 // and incarnation
	Msg         []byte
}

// serve runs the agent protocol on an accepted endpoint until it ends.
func (a *Agent) serve(in *inbound) {
	defer a.wg.Done()
	defer func() {
		in.ep.Close()
		a.mu.Lock()
		delete(a.inbound, in)
		a.mu.Unlock()
		a.stats.inbound.Add(-1)
	}()
	for {
		b, err := recvMsg(in.ep, a.ctx)
		if err != nil {
			return
		}
		m, err := decode(b)
		if err != nil {
			a.refuse(in, err)
			return
		}
		switch {
		case m.typ == msgHello && in.name == "":
			if m.expect != 0 && m.expect != a.inc {
				a.refuse(in, fmt.Errorf("%w: this is incarnation %016x of %s, not %016x", engine.ErrPeer, a.inc, a.cfg.Name, m.expect))
				return
			}
			in.name, in.inc = m.name, m.incarnation
			if err := a.hello(in, m.wantMeta); err != nil {
				a.log.Debug().Err(err).Str("peer", in.name).Msg("hello failed")
				return
			}
		case m.typ == msgNotify && in.name != "":
			n := Notification{From: in.name, Incarnation: in.inc, Msg: m.data}
			select {
			case a.notifyQ <- n:
				a.stats.notifyRecv.Add(1)
			case <-a.ctx.Done():
				return
			}
		case m.typ == msgRefuse:
			a.log.Debug().Str("peer", in.name).Str("why", string(m.data)).Msg("peer refused")
			return
		default:
			a.refuse(in, protoErr("unexpected %v from %q", m.typ, in.name))
			return
		}
	}
}

// hello answers a peer's hello: this agent's name, incarnation and Version,
// and the record if asked.
func (a *Agent) hello(in *inbound, wantMeta bool) error {
	md := a.Metadata()
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.InvalidateWait)
	defer cancel()
	if err := sendMsg(in.ep, ctx, encodeHello(a.cfg.Name, a.inc, 0, md.Version, false)); err != nil {
		return err
	}
	if !wantMeta {
		return nil
	}
	rec, err := md.Encode()
	if err != nil {
		return err
	}
	for _, c := range encodeMeta(rec) {
		if err := sendMsg(in.ep, ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// refuse tells the peer why this agent ends the connection.
func (a *Agent) refuse(in *inbound, why error) {
	a.log.Debug().Err(why).Str("peer", in.name).Msg("refusing peer")
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.InvalidateWait)
	_ = sendMsg(in.ep, ctx, encodeRefuse(why.Error()))
	cancel()
}

// Recv returns the next notification a peer sent, in order per sender. It
// fails with ctx's error (engine.ErrCanceled or engine.ErrTimeout) or
// engine.ErrClosed once the agent is closed.
func (a *Agent) Recv(ctx context.Context) (Notification, error) {
	select {
	case n := <-a.notifyQ:
		return n, nil
	default:
	}
	// Poll for the engine's WaitSpin before parking: a notification that
	// arrives meanwhile is taken without a goroutine's wakeup (about a
	// microsecond and a half across cores).
	if spin := a.eng.Config().WaitSpin; spin > 0 {
		until := time.Now().Add(spin)
		for i := 1; ; i++ {
			select {
			case n := <-a.notifyQ:
				return n, nil
			default:
			}
			if i&63 == 0 {
				if time.Now().After(until) || ctx.Err() != nil {
					break
				}
				runtime.Gosched()
			}
		}
	}
	select {
	case n := <-a.notifyQ:
		return n, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Notification{}, fmt.Errorf("%w: %w", engine.ErrTimeout, ctx.Err())
		}
		return Notification{}, fmt.Errorf("%w: %w", engine.ErrCanceled, ctx.Err())
	case <-a.ctx.Done():
		return Notification{}, engine.ErrClosed
	}
}

// Notify sends msg (at most MaxNotify bytes) to the named peer, without
// data. It blocks while the peer's queue is full (ctx bounds the wait).
func (a *Agent) Notify(ctx context.Context, peer string, msg []byte) error {
	for retried := false; ; retried = true {
		p, err := a.Peer(ctx, peer)
		if err != nil {
			return err
		}
		err = p.Notify(ctx, msg)
		if errors.Is(err, errUnreached) && !retried && p.Err() != nil {
			continue // the cached peer proved stale when dialed
		}
		return err
	}
}

// Notify sends msg to the peer (see Agent.Notify).
func (p *Peer) Notify(ctx context.Context, msg []byte) error {
	if len(msg) > MaxNotify {
		return invalid("notification of %d bytes, over %d", len(msg), MaxNotify)
	}
	ep, err := p.conn(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnreached, err)
	}
	return p.send(ctx, ep, encodeNotify(msg))
}

// send sends an encoded notification.
func (p *Peer) send(ctx context.Context, ep *engine.Endpoint, msg []byte) error {
	if err := sendMsg(ep, ctx, msg); err != nil {
		return p.wrap(err)
	}
	p.a.stats.notifySent.Add(1)
	return nil
}
