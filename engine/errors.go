package engine

import (
	"errors"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/queue"
)

// Sentinel errors. Match them with errors.Is; they wrap the underlying
// cause (an errno, a CS status) where there is one.
var (
	// ErrClosed: the engine (or the buffer's engine) is closed.
	ErrClosed = cq.ErrClosed
	// ErrQueueFull: a submission queue is full and Config.QueueFull is
	// FailWhenFull.
	ErrQueueFull = queue.ErrFull
	// ErrTimeout: the operation missed its deadline (Config.OpTimeout or
	// the Timeout option). The hardware may still complete it; the buffers
	// stay alive until it does, but the destination's content is undefined.
	ErrTimeout = errors.New("gxfer: operation timed out")
	// ErrInvalid: bad input (size, bounds, overlap, nil context...).
	ErrInvalid = errors.New("gxfer: invalid argument")
	// ErrFreed: the buffer was freed.
	ErrFreed = errors.New("gxfer: buffer freed")
	// ErrForeign: the buffer belongs to another engine.
	ErrForeign = errors.New("gxfer: buffer belongs to another engine")
	// ErrNotSupported: the operation is not available here.
	ErrNotSupported = errors.New("gxfer: not supported")
	// ErrNoDevice: the requested device does not exist.
	ErrNoDevice = errors.New("gxfer: no such device")
	// ErrAborted: the device aborted the operation (reset, context teardown).
	ErrAborted = errors.New("gxfer: operation aborted by the device")
	// ErrDevice: the device failed the operation (MMU fault, bad packet...).
	ErrDevice = errors.New("gxfer: device error")
	// ErrPanic: a worker panicked while handling the operation.
	ErrPanic = errors.New("gxfer: internal panic")
	// ErrNotEmulated: the device is real hardware; Engine.Emulator (fault
	// injection) applies to emulated devices only.
	ErrNotEmulated = errors.New("gxfer: not an emulated device")
)

// opError wraps a sentinel with the underlying cause.
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

func newErr(kind error, msg string, cause error) error {
	return &opError{kind: kind, msg: msg, err: cause}
}
