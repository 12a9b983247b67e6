// Package gxerr holds gxfer's error kinds, shared by the engine and the
// data paths it coordinates (package engine re-exports each one under its
// public name, e.g. engine.ErrPeer is gxerr.Peer), and the error type that
// wraps a kind with a message and a cause.
package gxerr

import (
	"context"
	"errors"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/queue"
)

// Error kinds; engine documents each under its exported name.
var (
	Closed          = cq.ErrClosed
	QueueFull       = queue.ErrFull
	Timeout         = errors.New("gxfer: operation timed out")
	Invalid         = errors.New("gxfer: invalid argument")
	Freed           = errors.New("gxfer: buffer freed")
	Foreign         = errors.New("gxfer: buffer belongs to another engine")
	NotSupported    = errors.New("gxfer: not supported")
	NoDevice        = errors.New("gxfer: no such device")
	Aborted         = errors.New("gxfer: operation aborted by the device")
	Device          = errors.New("gxfer: device error")
	Panic           = cq.ErrPanic
	NotEmulated     = errors.New("gxfer: not an emulated device")
	Peer            = errors.New("gxfer: peer error")
	Canceled        = errors.New("gxfer: operation canceled")
	NotDone         = errors.New("gxfer: operation not complete")
	Unauthenticated = errors.New("gxfer: peer not authenticated")
	TooManyPeers    = errors.New("gxfer: too many peers")
	NoCopier        = errors.New("gxfer: attached device has no device copier")
	DeviceLost      = errors.New("gxfer: device lost (reset)")
	NoMemory        = errors.New("gxfer: out of memory")
)

// opError wraps a kind with a message and the underlying cause.
type opError struct {
	kind error
	msg  string
	err  error
}

func (e *opError) Error() string {
	s := e.kind.Error()
	if e.msg != "" {
		s += ": " + e.msg
	}
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

func (e *opError) Unwrap() []error {
	if e.err == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.err}
}

// New is an error of kind with a message and an optional cause; both
// errors.Is(err, kind) and errors.Is(err, cause) hold.
func New(kind error, msg string, cause error) error {
	return &opError{kind: kind, msg: msg, err: cause}
}

// Ctx is the typed error of an operation whose context ended during one
// of its waits: Timeout for an expired deadline, Canceled for a
// cancellation, each wrapping the context's error.
func Ctx(what string, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return New(Timeout, what, err)
	case errors.Is(err, context.Canceled):
		return New(Canceled, what, err)
	}
	return err
}
