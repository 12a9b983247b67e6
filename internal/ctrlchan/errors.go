package ctrlchan

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// PeerErr is a gxerr.Peer error naming the peer.
func (c *Chan) PeerErr(what string, cause error) error {
	return gxerr.New(gxerr.Peer, c.cfg.Name+": "+what, cause)
}

// ReplyErr interprets a Completion or Error frame.
func (c *Chan) ReplyErr(f wire.Frame) error {
	if f.Header.Type == wire.TypeCompletion {
		// The usual reply, decoded on the stack (Message puts it on
		// the heap).
		var m wire.Completion
		if err := m.DecodePayload(f.Header, f.Payload); err != nil {
			return c.PeerErr("reply", err)
		}
		if m.Status != wire.StatusOK {
			return c.PeerErr("request failed", fmt.Errorf("status %v", m.Status))
		}
		return nil
	}
	msg, err := f.Message()
	if err != nil {
		return c.PeerErr("reply", err)
	}
	if m, ok := msg.(*wire.Error); ok {
		return c.Refusal("request refused", m)
	}
	return c.PeerErr("unexpected reply", nil)
}

// SendErr maps a failure to send on the connection: the channel's own
// error once it failed, else a peer error (a goneErr when the peer closed
// or reset the connection: see Fail).
func (c *Chan) SendErr(err error) error {
	if err == nil || errors.Is(err, gxerr.Peer) || errors.Is(err, gxerr.Closed) {
		return err
	}
	if errors.Is(err, wire.ErrClosed) {
		if f := c.Err(); f != nil {
			return f
		}
	}
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return goneErr{c.PeerErr("send", err)}
	}
	return c.PeerErr("send", err)
}

// goneErr is a failure to send because the peer closed or reset the
// connection: what it sent before may still be unread in the socket.
type goneErr struct{ error }

func (e goneErr) Unwrap() error { return e.error }

// Refusal maps an owner's refusal to an error kind: the caller's fault
// (gxerr.Invalid) for a key or range the owner refused, else the peer's.
func (c *Chan) Refusal(what string, m *wire.Error) error {
	switch m.Code {
	case wire.StatusOutOfRange, wire.StatusBadKey, wire.StatusAccess, wire.StatusStale:
		return gxerr.New(gxerr.Invalid, c.cfg.Name+": "+what, m)
	}
	return c.PeerErr(what, m)
}
