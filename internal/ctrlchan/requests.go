package ctrlchan

// Requests this side sends: the registrations of their replies, the slots
// that bound how many are outstanding, and round trips.

import (
	"context"
	"errors"
	"sync"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/wire"
)

// Expect registers fn for the reply to request id.
func (c *Chan) Expect(id uint64, fn func(wire.Frame, error)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return c.failed
	}
	c.pending[id] = datapath.ReplyFunc(fn)
	return nil
}

// ExpectRequest is Expect for a request the peer serves: it first takes
// one of the channel's MaxServing request slots, waiting while they are
// all taken until ctx ends (its error is then ctx's) or the channel
// fails. The slot is given back when the reply is delivered, the
// registration forgotten, or the channel fails.
func (c *Chan) ExpectRequest(ctx context.Context, id uint64, r datapath.Replier) error {
	if err := c.takeSlot(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	if c.failed != nil {
		err := c.failed
		c.mu.Unlock()
		<-c.slots
		return err
	}
	c.pending[id] = r
	c.held[id] = struct{}{}
	c.mu.Unlock()
	return nil
}

// RequestSlot takes a request slot as ExpectRequest does, for a request
// sent otherwise (RoundTrip); release gives it back (once the reply
// arrived, or the request was given up).
func (c *Chan) RequestSlot(ctx context.Context) (release func(), err error) {
	if err := c.takeSlot(ctx); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { <-c.slots }) }, nil
}

func (c *Chan) takeSlot(ctx context.Context) error {
	select {
	case c.slots <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.Err()
	}
}

// unholdLocked forgets that id holds a slot; true: the caller gives the
// slot back (outside mu).
func (c *Chan) unholdLocked(id uint64) bool {
	if _, ok := c.held[id]; ok {
		delete(c.held, id)
		return true
	}
	return false
}

// Forget takes back a registration; false: the reply (or the failure) is
// being delivered.
func (c *Chan) Forget(id uint64) bool {
	c.mu.Lock()
	_, still := c.pending[id]
	delete(c.pending, id)
	slot := c.unholdLocked(id)
	c.mu.Unlock()
	if slot {
		<-c.slots
	}
	return still
}

type reply struct {
	f   wire.Frame
	err error
}

// RoundTrip sends a request and waits for its reply frame (the caller
// owns the frame's fds). When ctx ends first, also while the request
// waits for the connection or is being written to a peer that does not
// read, it returns ctx's error (a write cut part-way fails the channel);
// a request that could not be sent, the error SendErr maps it to (the
// channel's own once it failed).
func (c *Chan) RoundTrip(ctx context.Context, id uint64, m wire.Message) (wire.Frame, error) {
	ch := make(chan reply, 1)
	if err := c.Expect(id, func(f wire.Frame, err error) {
		// Kept past the call: its own copy of the payload, which
		// aliases the connection's read buffer (datapath.Replier).
		f.Payload = append([]byte(nil), f.Payload...)
		ch <- reply{f, err}
	}); err != nil {
		return wire.Frame{}, err
	}
	if byCtx, _, err := c.sendCtx(ctx, m); err != nil {
		c.Forget(id)
		if byCtx {
			return wire.Frame{}, ctx.Err()
		}
		return wire.Frame{}, c.SendErr(err)
	}
	select {
	case r := <-ch:
		return r.f, r.err
	case <-ctx.Done():
		if !c.Forget(id) { // the reader took the reply: it is being delivered
			r := <-ch
			_ = r.f.CloseFDs()
		}
		return wire.Frame{}, ctx.Err()
	}
}

// sendCtx sends m within ctx (wire.Conn.SendCtx) and sorts out a
// failure: byCtx when ctx ended it (the error then wraps ctx's), broken
// when part of the frame went out. A broken stream is out of step: the
// channel fails here. Ended by ctx and not broken, nothing went out and
// the channel stays up.
func (c *Chan) sendCtx(ctx context.Context, m wire.Message) (byCtx, broken bool, err error) {
	if err = c.c.SendCtx(ctx, m); err == nil {
		return false, false, nil
	}
	if broken = errors.Is(err, wire.ErrBroken); broken {
		c.Fail(c.SendErr(err))
	}
	cerr := ctx.Err()
	return cerr != nil && errors.Is(err, cerr), broken, err
}
