package hlsys

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Error is a failed ioctl: the operation and the errno. Match the errno with
// errors.Is(err, unix.EBUSY) and friends.
type Error struct {
	Op    string     // e.g. "MEMORY ALLOC"
	Node  string     // the device node or emulator name
	Errno unix.Errno // the kernel's error
}

func (e *Error) Error() string {
	return fmt.Sprintf("hlsys: %s on %s: %v", e.Op, e.Node, e.Errno)
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

func wrap(b Backend, op string, err error) error {
	if err == nil {
		return nil
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return &Error{Op: op, Node: b.Name(), Errno: errno}
	}
	return fmt.Errorf("hlsys: %s on %s: %w", op, b.Name(), err)
}
