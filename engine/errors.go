package engine

import "github.com/gxfer/gxfer/internal/gxerr"

// Sentinel errors. Match them with errors.Is; they wrap the underlying
// cause (an errno, a CS status) where there is one.
var (
	// ErrClosed: the engine (or the buffer's engine) is closed.
	ErrClosed = gxerr.Closed
	// ErrQueueFull: a submission queue is full and Config.QueueFull is
	// FailWhenFull.
	ErrQueueFull = gxerr.QueueFull
	// ErrTimeout: the operation missed its deadline (Config.OpTimeout or
	// the Timeout option). The hardware may still complete it; the buffers
	// stay alive until it does, but the destination's content is undefined.
	ErrTimeout = gxerr.Timeout
	// ErrInvalid: bad input (size, bounds, overlap, nil context...).
	ErrInvalid = gxerr.Invalid
	// ErrFreed: the buffer was freed.
	ErrFreed = gxerr.Freed
	// ErrForeign: the buffer belongs to another engine.
	ErrForeign = gxerr.Foreign
	// ErrNotSupported: the operation is not available here.
	ErrNotSupported = gxerr.NotSupported
	// ErrNoDevice: the requested device does not exist.
	ErrNoDevice = gxerr.NoDevice
	// ErrAborted: the device aborted the operation (reset, context teardown).
	ErrAborted = gxerr.Aborted
	// ErrDevice: the device failed the operation (MMU fault, bad packet...).
	ErrDevice = gxerr.Device
	// ErrDeviceLost: the driver reset the Gaudi device (a command
	// submission hung past its timeout, or a fatal device error). The
	// engine released the device's context at once, as the driver
	// requires: copies in flight on it failed, and every buffer on it is
	// gone (its copies fail with ErrDeviceLost; Free still succeeds).
	ErrDeviceLost = gxerr.DeviceLost
	// ErrNoMemory: Alloc found no room: the device's memory (or the
	// Gaudi1 DRAM range) is used up, or the host cannot map the size.
	ErrNoMemory = gxerr.NoMemory
	// ErrPanic: a worker panicked while handling the operation.
	ErrPanic = gxerr.Panic
	// ErrNotEmulated: the device is real hardware; Engine.Emulator (fault
	// injection) applies to emulated devices only.
	ErrNotEmulated = gxerr.NotEmulated
)

// newErr is an error of kind with a message and an optional cause.
func newErr(kind error, msg string, cause error) error { return gxerr.New(kind, msg, cause) }

// ctxErr is the typed error of an operation whose ctx ended during one of
// its waits: ErrTimeout for an expired deadline, ErrCanceled for a
// cancellation, each wrapping ctx's error.
func ctxErr(what string, err error) error { return gxerr.Ctx(what, err) }
