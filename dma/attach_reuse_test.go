package dma

import (
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/lent"
)

// TestBorrowedFDReusedUnderUs: BorrowFD checks that the fd names a
// habanalabs compute node when it is called, and the runtime may close
// that fd afterwards and the number be reused by another file. Attach
// (and every later ioctl of the attachment, such as DramUsage's) trusted
// the old check and issued habanalabs ioctls to whatever the number named
// then. The target below is what BorrowFD leaves for an fd that was
// /dev/accel/accel0 and now is another file.
func TestBorrowedFDReusedUnderUs(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string
	}{
		{"reused by /dev/null", os.DevNull},
		{"reused by a regular file", "attach_reuse_test.go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Open(tc.path)
			require.NoError(t, err)
			defer f.Close()
			fd := int(f.Fd())
			bf := &borrowedFD{fd: fd, node: "/dev/accel/accel0"}
			_, err = Attach(lent.New(bf, fd, "fd"), PoolAnchor{MapVA: 1 << 40, PoolStart: 1 << 40, PoolLen: 4096}, AttachOptions{})
			require.ErrorIs(t, err, ErrInvalid)
			require.Contains(t, err.Error(), "no longer")

			var out [2]uint32
			a := &hlsys.InfoArgs{ReturnPointer: uint64(uintptr(unsafe.Pointer(&out))), ReturnSize: 8, Op: hlsys.InfoResetCount}
			require.ErrorIs(t, hlsys.Info(bf, a), ErrInvalid, "an ioctl through the stale target reached the other file")
			_, err = f.Stat()
			require.NoError(t, err, "the borrowed fd stays open")
		})
	}
}
