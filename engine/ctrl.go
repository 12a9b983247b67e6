package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// An endpoint's control channel: request ids, replies, the writer and its
// heartbeats, and the view of it a data path gets (ctrl, a
// datapath.Ctrl).

// ours reports whether request id was issued by this side.
func (ep *Endpoint) ours(id uint64) bool { return id&1 == ep.idParity }

// newID issues a request id of this side's parity.
func (ep *Endpoint) newID() uint64 { return ep.nextID.Add(2) }

// queueReply hands a frame the reader wants sent to the writer goroutine
// (or to the next Put or Get this side sends, which carries it along).
func (ep *Endpoint) queueReply(m wire.Message) error {
	ep.replyMu.Lock()
	if len(ep.replyQ) >= tcp.MaxInbound+maxServing {
		ep.replyMu.Unlock()
		return errors.New("peer is not reading its replies")
	}
	ep.replyQ = append(ep.replyQ, m)
	ep.replyMu.Unlock()
	select {
	case ep.replySig <- struct{}{}:
	default:
	}
	return nil
}

// takeReplies removes the queued replies (nil if none).
func (ep *Endpoint) takeReplies() []wire.Message {
	ep.replyMu.Lock()
	q := ep.replyQ
	ep.replyQ = nil
	ep.replyMu.Unlock()
	return q
}

// writer sends the reader's replies and the heartbeats.
func (ep *Endpoint) writer(every time.Duration) {
	defer close(ep.writerEnd)
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	hb := &wire.Heartbeat{}
	for {
		select {
		case <-ep.replySig:
			// Let a goroutine that is about to send (the code answering
			// the data just landed) go first and carry the replies.
			runtime.Gosched()
			for _, m := range ep.takeReplies() {
				if err := ep.c.Send(m); err != nil {
					ep.e.log.Debug().Err(err).Str("peer", ep.name).Msg("reply not sent")
				}
			}
		case <-tick:
			_ = ep.c.Send(hb)
			if ep.path != nil {
				ep.path.Tick()
			}
		case <-ep.done:
			return
		}
	}
}

// replyErr interprets a Completion or Error frame.
func (ep *Endpoint) replyErr(f wire.Frame) error {
	msg, err := f.Message()
	if err != nil {
		return ep.peerErr("reply", err)
	}
	switch msg := msg.(type) {
	case *wire.Completion:
		if msg.Status != wire.StatusOK {
			return ep.peerErr("request failed", fmt.Errorf("status %v", msg.Status))
		}
		return nil
	case *wire.Error:
		return ep.refusal("request refused", msg)
	}
	return ep.peerErr("unexpected reply", nil)
}

// sendErr maps a failure to send on the connection.
func (ep *Endpoint) sendErr(err error) error {
	if err == nil || errors.Is(err, ErrPeer) || errors.Is(err, ErrClosed) {
		return err
	}
	if errors.Is(err, wire.ErrClosed) {
		if f := ep.Err(); f != nil {
			return f
		}
	}
	return ep.peerErr("send", err)
}

// refusal maps an owner's refusal to an error kind.
func (ep *Endpoint) refusal(what string, m *wire.Error) error {
	switch m.Code {
	case wire.StatusOutOfRange, wire.StatusBadKey, wire.StatusAccess, wire.StatusStale:
		return newErr(ErrInvalid, ep.name+": "+what, m)
	}
	return ep.peerErr(what, m)
}

// ctrl is an Endpoint as its data path sees it.
type ctrl Endpoint

var _ datapath.Ctrl = (*ctrl)(nil)

func (ep *Endpoint) ctrl() *ctrl { return (*ctrl)(ep) }

func (c *ctrl) ep() *Endpoint { return (*Endpoint)(c) }

func (c *ctrl) Env() datapath.Env                        { return c.e.env() }
func (c *ctrl) Name() string                             { return c.name }
func (c *ctrl) Conn() *wire.Conn                         { return c.c }
func (c *ctrl) Peer() ipc.PeerID                         { return c.pid }
func (c *ctrl) PeerHello() *wire.Hello                   { return &c.peer }
func (c *ctrl) Dialer() bool                             { return c.idParity == 1 }
func (c *ctrl) NewID() uint64                            { return c.ep().newID() }
func (c *ctrl) Ours(id uint64) bool                      { return c.ep().ours(id) }
func (c *ctrl) MarkActive()                              { c.active.Store(true) }
func (c *ctrl) Fail(err error)                           { c.ep().fail(err) }
func (c *ctrl) Err() error                               { return c.ep().Err() }
func (c *ctrl) Done() <-chan struct{}                    { return c.done }
func (c *ctrl) TakeReplies() []wire.Message              { return c.ep().takeReplies() }
func (c *ctrl) QueueReply(m wire.Message) error          { return c.ep().queueReply(m) }
func (c *ctrl) PeerErr(what string, cause error) error   { return c.ep().peerErr(what, cause) }
func (c *ctrl) ReplyErr(f wire.Frame) error              { return c.ep().replyErr(f) }
func (c *ctrl) Refusal(what string, m *wire.Error) error { return c.ep().refusal(what, m) }
func (c *ctrl) SendErr(err error) error                  { return c.ep().sendErr(err) }

func (c *ctrl) RoundTrip(ctx context.Context, id uint64, m wire.Message) (wire.Frame, error) {
	return c.ep().roundTrip(ctx, id, m)
}

func (c *ctrl) Expect(id uint64, fn func(wire.Frame, error)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return c.failed
	}
	c.pending[id] = func(r reply) { fn(r.f, r.err) }
	return nil
}

func (c *ctrl) Forget(id uint64) bool {
	c.mu.Lock()
	_, still := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	return still
}

// Serve runs fn on a goroutine within the endpoint's limit of requests in
// progress (maxServing); Close waits for it.
func (c *ctrl) Serve(fn func()) bool {
	select {
	case c.sem <- struct{}{}:
	default:
		return false
	}
	c.serving.Add(1)
	c.e.async.Add(1)
	go func() {
		defer c.e.async.Done()
		defer c.serving.Done()
		defer func() { <-c.sem }()
		fn()
	}()
	return true
}
