// Package fd provides FD, the single owner of a raw file descriptor.
//
// Every descriptor gxfer opens (device nodes, DMA-BUF exports, memfds,
// eventfds, received SCM_RIGHTS fds) is wrapped in an FD at once. Close is
// idempotent; Disown hands the descriptor to another owner. A runtime cleanup
// closes a forgotten FD as a backstop only; code must call Close.
package fd

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrClosed is returned when an operation uses a closed FD.
var ErrClosed = os.ErrClosed

// FD owns one file descriptor.
type FD struct {
	raw     atomic.Int64
	cleanup runtime.Cleanup
}

// New takes ownership of raw. It returns an error for negative values.
func New(raw int) (*FD, error) {
	if raw < 0 {
		return nil, fmt.Errorf("fd: invalid descriptor %d", raw)
	}
	f := &FD{}
	f.raw.Store(int64(raw))
	f.cleanup = runtime.AddCleanup(f, func(r int) { _ = unix.Close(r) }, raw)
	return f, nil
}

// Int returns the raw descriptor, or -1 once closed. The caller must keep f
// alive (runtime.KeepAlive) while it uses the raw value.
func (f *FD) Int() int {
	if f == nil {
		return -1
	}
	return int(f.raw.Load())
}

// Close closes the descriptor. A second Close returns nil.
func (f *FD) Close() error {
	if f == nil {
		return nil
	}
	raw := f.raw.Swap(-1)
	if raw < 0 {
		return nil
	}
	f.cleanup.Stop()
	if err := unix.Close(int(raw)); err != nil && !errors.Is(err, unix.EINTR) {
		return fmt.Errorf("fd: close %d: %w", raw, err)
	}
	return nil
}

// Disown gives up ownership and returns the raw descriptor (-1 if closed).
func (f *FD) Disown() int {
	raw := f.raw.Swap(-1)
	if raw >= 0 {
		f.cleanup.Stop()
	}
	return int(raw)
}

// Dup returns a new FD for the same open file description (close-on-exec).
func (f *FD) Dup() (*FD, error) {
	raw := f.Int()
	if raw < 0 {
		return nil, ErrClosed
	}
	n, err := unix.FcntlInt(uintptr(raw), unix.F_DUPFD_CLOEXEC, 3)
	runtime.KeepAlive(f)
	if err != nil {
		return nil, fmt.Errorf("fd: dup %d: %w", raw, err)
	}
	return New(n)
}

// File moves ownership into an *os.File.
func (f *FD) File(name string) (*os.File, error) {
	raw := f.Disown()
	if raw < 0 {
		return nil, ErrClosed
	}
	return os.NewFile(uintptr(raw), name), nil
}
