package dma

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Sentinel errors. Every error returned by this package that has one of
// these causes wraps it, and also wraps the underlying hlsys error (and so
// the errno) when there is one: use errors.Is(err, dma.ErrNoMemory) or
// errors.Is(err, unix.ENOMEM).
var (
	// ErrInvalid: a bad argument (zero size, misaligned offset, a range
	// outside its allocation, a packet the driver rejected, ...).
	ErrInvalid = errors.New("invalid argument")
	// ErrDeviceBusy: the device could not be opened because another
	// context owns it (EBUSY) or is still being released (EAGAIN).
	ErrDeviceBusy = errors.New("device busy")
	// ErrNoMemory: out of device memory (or of the Gaudi1 DRAM range).
	ErrNoMemory = errors.New("out of device memory")
	// ErrBusy: the object is still in use (a DeviceMem with an open DMA-BUF
	// export, a CS queue that stayed full through every retry, or the
	// driver's context-switch phase that timed out before it submitted a
	// CS).
	ErrBusy = errors.New("resource busy")
	// ErrCSTimedOut: the device's CS timeout (TDR) expired for a CS.
	ErrCSTimedOut = errors.New("command submission timed out")
	// ErrCSAborted: a CS was aborted (device reset, context teardown).
	ErrCSAborted = errors.New("command submission aborted")
	// ErrCSOutcomeLost: the driver no longer knows how a CS ended: its
	// fence is gone (later CSs took its completion slot) and its outcome
	// left the driver's store (WAIT_CS reports COMPLETED with the GONE
	// flag and no timestamp). Whether its copies happened is unknown.
	ErrCSOutcomeLost = errors.New("command submission outcome lost")
	// ErrCBFull: the packets do not fit in the command buffer.
	ErrCBFull = errors.New("command buffer full")
	// ErrNotSupported: the device, model or kernel API cannot do this.
	ErrNotSupported = errors.New("not supported")
	// ErrClosed: the Device (or the object) is closed. It is os.ErrClosed.
	ErrClosed = os.ErrClosed
	// ErrUnsupportedDevice: the PCI device id is not a Gaudi this package
	// drives (e.g. Goya).
	ErrUnsupportedDevice = errors.New("unsupported device")
	// ErrNotOperational: DEVICE_STATUS is not OPERATIONAL (at open), or
	// the driver refused a CS or a wait because the device was not
	// operational (reset in progress, malfunction).
	ErrNotOperational = errors.New("device not operational")
	// ErrDeviceReset: the driver reset the device (it reported
	// DEVICE_RESET on the Device's eventfd). The Device released its
	// context: every CS in flight, every later call and every memory,
	// mapping and command buffer of the Device fail with it. Open the
	// device again for a new context.
	ErrDeviceReset = errors.New("device reset")
	// ErrMalfunction: the driver reports the device in malfunction (open
	// returned EPERM, or DEVICE_STATUS is MALFUNCTION / NEEDS_RESET).
	ErrMalfunction = errors.New("device malfunction")
)

// Error is a failed dma operation. It wraps Kind (one of the sentinels, or
// nil) and Err (the cause, usually the driver binding's error carrying the
// errno), so errors.Is matches the sentinel and the errno (unix.ENOMEM...).
type Error struct {
	Op     string // what was being done, e.g. "alloc device memory (4096 bytes)"
	Kind   error  // sentinel, may be nil
	Detail string // extra explanation, may be empty
	Err    error  // cause, may be nil
}

func (e *Error) Error() string {
	parts := make([]string, 0, 4)
	parts = append(parts, "dma: "+e.Op)
	if e.Kind != nil {
		parts = append(parts, e.Kind.Error())
	}
	if e.Detail != "" {
		parts = append(parts, e.Detail)
	}
	if e.Err != nil {
		parts = append(parts, e.Err.Error())
	}
	return strings.Join(parts, ": ")
}

// Unwrap returns Kind and Err.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

func newErr(op string, kind error, detail string, err error) *Error {
	return &Error{Op: op, Kind: kind, Detail: detail, Err: err}
}

// errnoKind maps the errno inside err to a sentinel for operations without
// a more specific mapping. It returns nil when there is none. ETIMEDOUT
// has none: only a CS wait's means that the device's CS timeout expired
// (ErrCSTimedOut), and Wait maps it itself.
func errnoKind(err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return nil
	}
	switch errno {
	case unix.EINVAL, unix.EFAULT, unix.E2BIG:
		return ErrInvalid
	case unix.ENOMEM:
		return ErrNoMemory
	case unix.EBUSY, unix.EAGAIN:
		return ErrBusy
	case unix.ENOTTY, unix.EOPNOTSUPP, unix.ENOSYS:
		return ErrNotSupported
	case unix.ENODEV:
		return ErrNotOperational
	}
	return nil
}

// wrapErr wraps a backend error with the generic errno mapping.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrClosed) {
		return newErr(op, nil, "", err)
	}
	return newErr(op, errnoKind(err), "", err)
}

// ioErr wraps the error of a MEMORY or CB ioctl (allocation, mapping,
// export, CB create/destroy). The driver refuses those with EBUSY while
// the device is not operational (hl_mem_ioctl in memory.c, hl_cb_ioctl in
// command_buffer.c: "Device is %s. Can't execute MEMORY/CB IOCTL"), so
// EBUSY is mapped by DEVICE_STATUS: an error wrapping ErrNotOperational
// when the device is not operational, the generic mapping (ErrBusy)
// otherwise. detail, if not empty, is added to the error.
func (d *Device) ioErr(op, detail string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EBUSY) {
		if e := d.notOperational(op, "the driver refused the call", err); e != nil {
			return e
		}
	}
	if detail == "" {
		return wrapErr(op, err)
	}
	return newErr(op, errnoKind(err), detail, err)
}
