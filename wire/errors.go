package wire

import (
	"errors"
	"fmt"
	"os"
)

// Sentinel errors. Match them with [errors.Is]; the returned errors wrap
// them with the detail.
var (
	// ErrMalformed: a frame or message from the peer is not a valid
	// encoding (truncated, bad magic, reserved bits set, lengths or counts
	// that do not add up, unknown enum values, trailing bytes...). A peer
	// that sends one is broken or hostile; the connection should be closed.
	ErrMalformed = errors.New("wire: malformed frame")
	// ErrTooLarge: a frame is larger than the receiver's limit. It also
	// matches ErrMalformed.
	ErrTooLarge = errors.New("wire: frame too large")
	// ErrVersion: a frame or Hello carries a protocol version this package
	// does not speak, or two peers' version ranges do not overlap. See
	// [VersionError].
	ErrVersion = errors.New("wire: unsupported protocol version")
	// ErrBadSignature: a RemoteKey's MAC does not verify under the owner's
	// secret: the key was forged, edited, or issued by another engine.
	ErrBadSignature = errors.New("wire: remote key signature mismatch")
	// ErrOutOfRange: a request falls outside a RemoteKey's view, is empty,
	// or overflows.
	ErrOutOfRange = errors.New("wire: range outside the remote key")
	// ErrInvalid: the caller asked to encode something invalid (a string
	// over its bound, an unknown enum, a key whose range overflows, a short
	// secret...). It also matches os.ErrInvalid.
	ErrInvalid = fmt.Errorf("wire: invalid argument: %w", os.ErrInvalid)
	// ErrFDsNotSupported: file descriptors were given to a transport that
	// cannot carry them (a byte stream such as TCP).
	ErrFDsNotSupported = errors.New("wire: transport cannot carry file descriptors")
	// ErrBroken: a write failed part-way through a frame (a stream
	// transport): the stream is out of step, and every later send on it
	// fails the same way. The connection should be closed.
	ErrBroken = errors.New("wire: stream broken")
	// ErrClosed: the connection is closed. It also matches os.ErrClosed
	// and net.ErrClosed.
	ErrClosed = os.ErrClosed
)

// malformed returns an error matching ErrMalformed with a detail.
func malformed(format string, args ...any) error {
	return &detailError{kind: ErrMalformed, msg: fmt.Sprintf(format, args...)}
}

// invalid returns an error matching ErrInvalid with a detail.
func invalid(format string, args ...any) error {
	return &detailError{kind: ErrInvalid, msg: fmt.Sprintf(format, args...)}
}

// detailError is a sentinel plus a detail; it matches its sentinel (and,
// for ErrTooLarge, ErrMalformed too).
type detailError struct {
	kind error
	msg  string
}

func (e *detailError) Error() string { return e.kind.Error() + ": " + e.msg }

func (e *detailError) Unwrap() []error {
	if e.kind == ErrTooLarge {
		return []error{ErrTooLarge, ErrMalformed}
	}
	return []error{e.kind}
}

// VersionError reports a protocol version outside the supported range. It
// matches ErrVersion.
type VersionError struct {
	Got      uint16 // the version received (for a range mismatch: the peer's MaxVersion)
	Min, Max uint16 // the range accepted
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("wire: unsupported protocol version %d (supported %d..%d)", e.Got, e.Min, e.Max)
}

// Is makes a VersionError match ErrVersion.
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// RangeError reports a request outside a RemoteKey's view. It matches
// ErrOutOfRange.
type RangeError struct {
	Off, Len uint64 // the request, relative to the key's view
	ViewOff  uint64 // the key's view, relative to the allocation
	ViewLen  uint64
	Length   uint64 // the signed allocation length
	Reason   string
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("wire: request [%d, +%d) outside remote key view [%d, +%d) of %d bytes: %s",
		e.Off, e.Len, e.ViewOff, e.ViewLen, e.Length, e.Reason)
}

// Is makes a RangeError match ErrOutOfRange.
func (e *RangeError) Is(target error) bool { return target == ErrOutOfRange }
