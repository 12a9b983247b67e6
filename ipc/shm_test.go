package ipc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"unsafe"

	"github.com/gxfer/gxfer/internal/fd"
)

func TestShared(t *testing.T) {
	sh, err := NewShared(10000, "test")
	require.NoError(t, err)
	b := sh.Bytes()
	require.Len(t, b, 10000)
	require.Equal(t, 10000, sh.Size())
	require.Zero(t, unsafePointer(b)%uintptr(os.Getpagesize()), "page aligned")
	for _, c := range b {
		require.Zero(t, c)
	}
	fill(b, 1)

	// A second mapping of the same memfd sees the same pages.
	m, err := MapShared(sh.FD(), 10000)
	require.NoError(t, err)
	checkPattern(t, m.Bytes(), 1)
	m.Bytes()[0] = 0xEE
	require.Equal(t, byte(0xEE), b[0])
	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "Close is idempotent")
	require.Nil(t, m.Bytes())

	// The file is sealed: a peer cannot shrink or grow it.
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(sh.FD().Int(), &st))
	require.Equal(t, int64(12288), st.Size, "rounded up to pages")
	require.ErrorIs(t, unix.Ftruncate(sh.FD().Int(), 0), unix.EPERM)
	require.ErrorIs(t, unix.Ftruncate(sh.FD().Int(), 1<<20), unix.EPERM)
	_, err = unix.FcntlInt(uintptr(sh.FD().Int()), unix.F_ADD_SEALS, unix.F_SEAL_WRITE)
	require.ErrorIs(t, err, unix.EPERM, "seals are sealed")

	require.NoError(t, sh.Close())
	require.NoError(t, sh.Close(), "Close is idempotent")
	require.Nil(t, sh.Bytes())
	require.Equal(t, -1, sh.FD().Int())

	_, err = NewShared(0, "x")
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewShared(-1, "x")
	require.ErrorIs(t, err, ErrInvalid)
	long, err := NewShared(1, strings.Repeat("n", 1000)) // an over-long name is truncated
	require.NoError(t, err)
	require.NoError(t, long.Close())
}

func TestMapSharedRefuses(t *testing.T) {
	// Too small.
	sh, err := NewShared(4096, "small")
	require.NoError(t, err)
	defer sh.Close()
	_, err = MapShared(sh.FD(), 4097+4096)
	require.ErrorIs(t, err, ErrTooSmall)
	_, err = MapShared(sh.FD(), 0)
	require.ErrorIs(t, err, ErrInvalid)

	// A pipe.
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	r, _ := fd.New(p[0])
	w, _ := fd.New(p[1])
	defer r.Close()
	defer w.Close()
	_, err = MapShared(r, 4096)
	require.ErrorIs(t, err, ErrNotMemfd)

	// A regular file (cannot be sealed).
	f, err := os.Create(filepath.Join(t.TempDir(), "file"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(8192))
	rf, err := fd.New(int(f.Fd()))
	require.NoError(t, err)
	_, err = MapShared(rf, 4096)
	rf.Disown()
	require.NoError(t, f.Close())
	require.ErrorIs(t, err, ErrNotMemfd)

	// A memfd without F_SEAL_SHRINK: the peer could truncate it under us.
	raw, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	uf, _ := fd.New(raw)
	defer uf.Close()
	require.NoError(t, unix.Ftruncate(raw, 4096))
	_, err = MapShared(uf, 4096)
	require.ErrorIs(t, err, ErrNotMemfd)

	// A closed FD.
	c, err := sh.FD().Dup()
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, err = MapShared(c, 4096)
	require.ErrorIs(t, err, fd.ErrClosed)
}

// TestMapSharedRefusesHugetlb: a sealed hugetlbfs memfd (MFD_HUGETLB) is
// refused, by MapShared and MapValidity. The kernel rounds a mapping of
// one up to whole huge pages (ksys_mmap_pgoff), and munmap of the length
// asked for then has to split the huge page mapping, which it refuses
// (hugetlb_vm_op_split: EINVAL): Close failed and every such import
// left 2 MiB mapped (and the peer's huge page held) for good. Where no
// huge page is free the mmap fails instead (ENOMEM), not as a refusal.
func TestMapSharedRefusesHugetlb(t *testing.T) {
	raw, err := unix.MemfdCreate("huge", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_HUGETLB)
	if err != nil {
		t.Skipf("no hugetlbfs memfd: %v", err)
	}
	f, err := fd.New(raw)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Ftruncate(raw, 2<<20))
	_, err = unix.FcntlInt(uintptr(raw), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
	require.NoError(t, err)
	m, err := MapShared(f, 4096)
	if m != nil {
		t.Errorf("mapped; Close: %v", m.Close())
	}
	require.ErrorIs(t, err, ErrNotMemfd)
	v, err := MapValidity(f)
	if v != nil {
		t.Errorf("mapped; Close: %v", v.Close())
	}
	require.ErrorIs(t, err, ErrNotMemfd)
}

func unsafePointer(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
