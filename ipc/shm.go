package ipc

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
)

// memfdNameMax is the longest name memfd_create accepts (249 bytes).
const memfdNameMax = 249

// Shared is host memory that can be shared with local peers: a memfd
// mapped MAP_SHARED, page aligned and outside the Go heap. Send FD() to a
// peer (Conn.Send); the peer maps it with MapShared and both see the same
// pages.
//
// The memfd is sealed against shrinking and growing (F_SEAL_SHRINK,
// F_SEAL_GROW, F_SEAL_SEAL), so a peer holding it cannot truncate it under
// this process's mapping (which would turn accesses into SIGBUS).
type Shared struct {
	f    *fd.FD
	mem  []byte // the whole mapping (page multiple)
	b    atomic.Pointer[[]byte]
	size int

	mu     sync.Mutex
	closed bool
}

// NewShared creates size bytes of shared memory. name labels the memfd
// (seen in /proc/<pid>/fd and maps; truncated to 249 bytes). The file and
// the mapping are rounded up to whole pages; Bytes returns exactly size
// bytes, zeroed.
func NewShared(size int, name string) (_ *Shared, err error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: shared memory of %d bytes", ErrInvalid, size)
	}
	page := os.Getpagesize()
	if size > int(^uint(0)>>1)-page {
		return nil, fmt.Errorf("%w: shared memory of %d bytes", ErrInvalid, size)
	}
	full := (size + page - 1) &^ (page - 1)
	f, raw, err := newMemfd(name, full)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	if _, err := unix.FcntlInt(uintptr(raw), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return nil, fmt.Errorf("ipc: memfd seal: %w", err)
	}
	mem, err := unix.Mmap(raw, 0, full, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	runtime.KeepAlive(f)
	if err != nil {
		return nil, fmt.Errorf("ipc: mmap %d bytes: %w", full, err)
	}
	s := &Shared{f: f, mem: mem, size: size}
	b := mem[:size:size]
	s.b.Store(&b)
	return s, nil
}

// Bytes returns the memory (nil after Close). It must not be used after
// Close.
func (s *Shared) Bytes() []byte {
	if p := s.b.Load(); p != nil {
		return *p
	}
	return nil
}

// Size returns the size asked of NewShared.
func (s *Shared) Size() int { return s.size }

// FD returns the memfd. The Shared keeps owning it: do not close it; pass
// it to Conn.Send (which duplicates it into the peer), or Dup it.
func (s *Shared) FD() *fd.FD { return s.f }

// Close unmaps the memory and closes the memfd. Peers that mapped it keep
// their mapping. Later calls return nil.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.b.Store(nil)
	var errs []error
	if err := unix.Munmap(s.mem); err != nil {
		errs = append(errs, fmt.Errorf("ipc: munmap: %w", err))
	}
	s.mem = nil
	if err := s.f.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Mapping is a peer's shared memory mapped into this process (MapShared).
type Mapping struct {
	mem []byte
	b   atomic.Pointer[[]byte]

	mu     sync.Mutex
	closed bool
}

// MapShared maps the first size bytes of a memfd received from a peer,
// MAP_SHARED and read-write. The descriptor is untrusted: MapShared
// refuses (ErrNotMemfd) anything that is not a regular file sealed
// against shrinking (only memfds can be sealed; without F_SEAL_SHRINK the
// peer could truncate the file under the mapping and accesses would raise
// SIGBUS) or that is on hugetlbfs (its mapping could not be unmapped),
// and (ErrTooSmall) a file smaller than size. f stays the
// caller's: it may be closed as soon as MapShared returns.
func MapShared(f *fd.FD, size int) (*Mapping, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: mapping of %d bytes", ErrInvalid, size)
	}
	defer runtime.KeepAlive(f)
	raw, st, err := sealedMemfd(f, "map")
	if err != nil {
		return nil, err
	}
	if st.Size < 0 || uint64(st.Size) < uint64(size) {
		return nil, fmt.Errorf("%w: %d bytes, %d requested", ErrTooSmall, st.Size, size)
	}
	mem, err := unix.Mmap(raw, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ipc: mmap %d bytes: %w", size, err)
	}
	m := &Mapping{mem: mem}
	b := mem[:size:size]
	m.b.Store(&b)
	return m, nil
}

// newMemfd creates a sealable memfd of size bytes (name cut to the
// kernel's limit) and returns it with its raw descriptor.
func newMemfd(name string, size int) (*fd.FD, int, error) {
	if len(name) > memfdNameMax {
		name = name[:memfdNameMax]
	}
	raw, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, fmt.Errorf("ipc: memfd_create: %w", err)
	}
	f, err := fd.New(raw)
	if err != nil {
		return nil, -1, err
	}
	if err := unix.Ftruncate(raw, int64(size)); err != nil {
		_ = f.Close()
		return nil, -1, fmt.Errorf("ipc: memfd ftruncate %d: %w", size, err)
	}
	return f, raw, nil
}

// sealedMemfd checks that an untrusted descriptor is a regular file (a
// memfd) sealed against shrinking, so that a mapping of it cannot fault
// when its sender truncates it, and not on hugetlbfs, and returns the raw
// descriptor and its stat. The caller keeps f alive while it uses raw.
func sealedMemfd(f *fd.FD, op string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	raw := f.Int()
	if raw < 0 {
		return -1, st, fmt.Errorf("ipc: %s: %w", op, fd.ErrClosed)
	}
	if err := unix.Fstat(raw, &st); err != nil {
		return -1, st, fmt.Errorf("ipc: %s: fstat: %w", op, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, st, fmt.Errorf("%w: file mode %#o", ErrNotMemfd, st.Mode)
	}
	seals, err := unix.FcntlInt(uintptr(raw), unix.F_GET_SEALS, 0)
	if err != nil {
		return -1, st, fmt.Errorf("%w: F_GET_SEALS: %v", ErrNotMemfd, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return -1, st, fmt.Errorf("%w: seals %#x lack F_SEAL_SHRINK", ErrNotMemfd, seals)
	}
	// A hugetlbfs memfd (MFD_HUGETLB) is mapped in whole huge pages
	// whatever length is asked (ksys_mmap_pgoff), and munmap of that
	// length cannot split them (hugetlb_vm_op_split): Close would fail and
	// leave the mapping. gxfer shares only tmpfs memfds.
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(raw, &sfs); err != nil {
		return -1, st, fmt.Errorf("ipc: %s: fstatfs: %w", op, err)
	}
	if uint32(sfs.Type) == unix.HUGETLBFS_MAGIC {
		return -1, st, fmt.Errorf("%w: a hugetlbfs file", ErrNotMemfd)
	}
	return raw, st, nil
}

// Bytes returns the mapped memory (nil after Close). It must not be used
// after Close.
func (m *Mapping) Bytes() []byte {
	if p := m.b.Load(); p != nil {
		return *p
	}
	return nil
}

// Close unmaps the memory. Later calls return nil.
func (m *Mapping) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	m.b.Store(nil)
	err := unix.Munmap(m.mem)
	m.mem = nil
	if err != nil {
		return fmt.Errorf("ipc: munmap: %w", err)
	}
	return nil
}
