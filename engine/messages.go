package engine

import (
	"context"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/wire"
)

// MaxMessage is the largest message Endpoint.Send sends.
const MaxMessage = wire.MaxAppMsg

// Send sends msg (at most MaxMessage bytes; empty is allowed) to the peer
// on the control channel, where the peer's Recv returns it. On a unix
// endpoint it writes msg into a shared-memory ring the peer granted, on
// the caller's goroutine (package doc, "Messages").
//
// Messages of one endpoint arrive in the order of Send calls that do not
// overlap. A message is delivered only after every byte of every Put on
// this endpoint whose future completed before Send was called is visible
// in the peer's memory: on RDMA, Send first fences each queue pair that
// wrote since the last fence (an RDMA read behind the writes); on unix and
// TCP it is already so when the future completes (package doc,
// "Messages"). So a Put followed by a Send is a notification the peer can
// act on: when the message arrives, the bytes are there.
//
// Send blocks while the peer has not taken earlier messages with Recv
// (a bounded window of messages and bytes the peer grants), and while a
// peer that does not read holds up the connection; ctx bounds the wait:
// ErrCanceled or ErrTimeout, wrapping ctx's error, and the message was
// not sent (on TCP, a write ctx cut part-way also fails the endpoint:
// ErrPeer from then on). It returns ErrInvalid for a message larger than
// MaxMessage, ErrPeer or ErrClosed once the endpoint has failed or been
// closed, ErrNotSupported if the peer does not take messages (an older
// engine). Send does not keep msg.
func (ep *Endpoint) Send(ctx context.Context, msg []byte) error {
	if ep.invalid() {
		return errNoEndpoint
	}
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if ep.e.closed.Load() {
		return ErrClosed
	}
	var fence func(context.Context) error
	if f, ok := ep.path.(datapath.Fencer); ok {
		// In the starts gate: the fence (an RDMA read behind the writes)
		// holds the transport's scratch buffer and a memory region,
		// which Engine.Close releases once no start is under way.
		fence = func(ctx context.Context) error {
			if !ep.e.enterStart() {
				return ErrClosed
			}
			defer ep.e.exitStart()
			return f.Fence(ctx)
		}
	}
	ep.ch.MarkUsed() // in use (see Endpoint.start)
	return ep.ch.SendMsg(ctx, msg, fence)
}

// Recv returns the next message from the peer (a copy the caller owns),
// waiting while ctx lasts (ErrCanceled or ErrTimeout when it ends first).
// Taking a message returns its room in the window to the peer. Once the
// endpoint has failed or been closed, Recv still returns every message
// that arrived before, then the endpoint's error (ErrPeer, ErrClosed).
// Concurrent Recv calls each get different messages. On a unix endpoint
// a Recv with nothing to take polls the peer's ring for Config.WaitSpin
// before it blocks.
func (ep *Endpoint) Recv(ctx context.Context) ([]byte, error) {
	if ep.invalid() {
		return nil, errNoEndpoint
	}
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	return ep.ch.RecvMsg(ctx)
}

// TryRecv is Recv without the wait: it takes the next message from the
// peer if one is there (ok false: none yet). Once the endpoint has failed
// or been closed and no message is left, it returns the endpoint's error.
// With WaitRecv it lets a caller poll several endpoints on its own
// goroutine, or take a message only under a lock of its own.
func (ep *Endpoint) TryRecv() (msg []byte, ok bool, err error) {
	if ep.invalid() {
		return nil, false, errNoEndpoint
	}
	return ep.ch.TryRecvMsg()
}

// WaitRecv waits, while ctx lasts, until a message from the peer is there
// for Recv or TryRecv to take (or the endpoint has failed or been closed:
// TryRecv then says which), taking none. It waits as Recv does: on a unix
// endpoint polling the peer's ring for Config.WaitSpin before it blocks.
// Another caller may take the message first.
func (ep *Endpoint) WaitRecv(ctx context.Context) error {
	if ep.invalid() {
		return errNoEndpoint
	}
	if err := checkCtx(ctx); err != nil {
		return err
	}
	return ep.ch.WaitMsg(ctx)
}
