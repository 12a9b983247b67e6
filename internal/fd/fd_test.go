package fd_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// isOpen reports whether raw is an open descriptor of this process.
func isOpen(raw int) bool {
	_, err := unix.FcntlInt(uintptr(raw), unix.F_GETFD, 0)
	return err == nil
}

// newPipe returns the read end of a new pipe as an FD; the write end is
// closed at the test's end.
func newPipe(t *testing.T) *fd.FD {
	t.Helper()
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	t.Cleanup(func() { _ = unix.Close(p[1]) })
	f, err := fd.New(p[0])
	require.NoError(t, err)
	return f
}

func TestNewRefusesNegative(t *testing.T) {
	for _, raw := range []int{-1, -2, -1 << 30} {
		f, err := fd.New(raw)
		require.Error(t, err, "raw %d", raw)
		require.Nil(t, f)
	}
}

// TestOwnership: what each way of ending ownership leaves open.
func TestOwnership(t *testing.T) {
	for _, tc := range []struct {
		name     string
		end      func(t *testing.T, f *fd.FD) (keep int) // a descriptor the test must close, or -1
		leftOpen bool
	}{
		{"close", func(t *testing.T, f *fd.FD) int {
			require.NoError(t, f.Close())
			return -1
		}, false},
		{"close twice", func(t *testing.T, f *fd.FD) int {
			require.NoError(t, f.Close())
			require.NoError(t, f.Close(), "a second Close is a no-op")
			return -1
		}, false},
		{"disown", func(t *testing.T, f *fd.FD) int {
			raw := f.Disown()
			require.GreaterOrEqual(t, raw, 0)
			require.Equal(t, -1, f.Disown(), "disowned once")
			require.NoError(t, f.Close(), "Close after Disown closes nothing")
			return raw
		}, true},
		{"file", func(t *testing.T, f *fd.FD) int {
			file, err := f.File("pipe")
			require.NoError(t, err)
			require.NoError(t, f.Close(), "the *os.File owns it now")
			raw := int(file.Fd())
			require.True(t, isOpen(raw))
			require.NoError(t, file.Close())
			return -1
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPipe(t)
			raw := f.Int()
			require.True(t, isOpen(raw))
			keep := tc.end(t, f)
			require.Equal(t, -1, f.Int(), "the FD no longer names a descriptor")
			require.Equal(t, tc.leftOpen, isOpen(raw))
			if keep >= 0 {
				require.NoError(t, unix.Close(keep))
			}
		})
	}
}

func TestClosedFD(t *testing.T) {
	f := newPipe(t)
	require.NoError(t, f.Close())
	_, err := f.Dup()
	require.ErrorIs(t, err, fd.ErrClosed)
	_, err = f.File("x")
	require.ErrorIs(t, err, fd.ErrClosed)

	var nilFD *fd.FD
	require.Equal(t, -1, nilFD.Int())
	require.NoError(t, nilFD.Close())
}

func TestDup(t *testing.T) {
	f := newPipe(t)
	d, err := f.Dup()
	require.NoError(t, err)
	require.NotEqual(t, f.Int(), d.Int())
	flags, err := unix.FcntlInt(uintptr(d.Int()), unix.F_GETFD, 0)
	require.NoError(t, err)
	require.NotZero(t, flags&unix.FD_CLOEXEC, "the duplicate is close-on-exec")
	raw := f.Int()
	require.NoError(t, f.Close())
	require.True(t, isOpen(d.Int()), "closing one leaves the other")
	require.False(t, isOpen(raw))
	require.NoError(t, d.Close())
}

// TestConcurrentClose: of many Close calls racing, one closes the
// descriptor and none closes it again (a second close(2) of the number
// could close a descriptor opened meanwhile by someone else).
func TestConcurrentClose(t *testing.T) {
	for range 50 {
		f := newPipe(t)
		raw := f.Int()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() { errs <- f.Close() })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.False(t, isOpen(raw))
	}
}

// TestForgottenFDIsClosed: the runtime cleanup closes the descriptor of
// an FD that became unreachable without Close (a backstop, not a way to
// close).
func TestForgottenFDIsClosed(t *testing.T) {
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	defer unix.Close(p[1])
	func() {
		f, err := fd.New(p[0])
		require.NoError(t, err)
		runtime.KeepAlive(f)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for isOpen(p[0]) && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.False(t, isOpen(p[0]), "the cleanup closed the forgotten descriptor")
}
