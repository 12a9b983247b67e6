package ipc

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/fd"
)

// Validity is a shared flag that tells the peers that mapped an allocation
// whether it still lives: a one-page memfd whose first 8 bytes hold 0
// until the owner calls Revoke (1: the allocation was freed) or CloseGone
// (ownerGone: the owner's engine closed). The owner maps it read-write and then
// seals it with F_SEAL_FUTURE_WRITE (and against shrinking and growing),
// so a peer that receives the fd can map it read-only only: no peer can
// clear or set the flag that the others read.
//
// A peer that copied into or out of a mapping checks the flag after the
// copy (ValidityView.Revoked): set, the allocation was freed before or
// during the copy and the copy must be reported as failed (the bytes may
// have gone to memory that no longer belongs to the allocation).
type Validity struct {
	f    *fd.FD
	mem  []byte
	word *atomic.Uint64

	mu     sync.Mutex
	closed bool
}

// NewValidity creates a validity flag (not revoked). name labels the
// memfd.
func NewValidity(name string) (_ *Validity, err error) {
	page := os.Getpagesize()
	f, raw, err := newMemfd(name, page)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	mem, err := unix.Mmap(raw, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ipc: mmap validity page: %w", err)
	}
	// Our mapping stays writable; every mapping made after the seal (the
	// peers') can only be read-only.
	seals := unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(raw), unix.F_ADD_SEALS, seals); err != nil {
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("ipc: memfd seal: %w", err)
	}
	runtime.KeepAlive(f)
	return &Validity{f: f, mem: mem, word: (*atomic.Uint64)(unsafe.Pointer(&mem[0]))}, nil
}

// FD returns the memfd to send to peers (the Validity keeps owning it).
func (v *Validity) FD() *fd.FD { return v.f }

// Revoke sets the flag: the allocation is being freed. Call it before the
// allocation's memory is released. Idempotent; a no-op after Close.
func (v *Validity) Revoke() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.closed {
		v.word.Store(1)
	}
}

// ownerGone is the flag's value once the owner's engine closed (CloseGone)
// with the allocation still live: peers read it as revoked, and
// ValidityView.OwnerGone tells them the owner went.
const ownerGone = 2

// Close revokes, unmaps and closes the memfd (peers' mappings stay, and
// read the flag as revoked). Idempotent.
func (v *Validity) Close() error { return v.close(1) }

// CloseGone is Close when the owner itself goes (its engine closes, its
// endpoints ended): an allocation not freed before is marked ownerGone,
// so that a peer's copy reports the peer gone, not a stale key, even
// before it has read the owner's Bye. Idempotent.
func (v *Validity) CloseGone() error { return v.close(ownerGone) }

func (v *Validity) close(why uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil
	}
	v.word.CompareAndSwap(0, why) // a Revoke before (freed) stays
	v.closed = true
	err := unix.Munmap(v.mem)
	v.mem, v.word = nil, nil
	return joinErr(err, v.f.Close())
}

func joinErr(munmap, closeErr error) error {
	if munmap != nil {
		return fmt.Errorf("ipc: munmap: %w", munmap)
	}
	return closeErr
}

// ValidityView is a peer's read-only mapping of a Validity.
type ValidityView struct {
	mem  []byte
	word atomic.Pointer[atomic.Uint64] // nil after Close

	mu     sync.Mutex
	closed bool
}

// MapValidity maps a validity flag received from a peer, read-only. The
// descriptor is untrusted: it must be a memfd sealed against shrinking
// (ErrNotMemfd otherwise) of at least 8 bytes (ErrTooSmall). f stays the
// caller's.
func MapValidity(f *fd.FD) (*ValidityView, error) {
	defer runtime.KeepAlive(f)
	raw, st, err := sealedMemfd(f, "map validity")
	if err != nil {
		return nil, err
	}
	page := os.Getpagesize()
	if st.Size < int64(page) {
		return nil, fmt.Errorf("%w: validity page of %d bytes", ErrTooSmall, st.Size)
	}
	mem, err := unix.Mmap(raw, 0, page, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ipc: mmap validity page: %w", err)
	}
	v := &ValidityView{mem: mem}
	v.word.Store((*atomic.Uint64)(unsafe.Pointer(&mem[0])))
	return v, nil
}

// Revoked reports whether the owner revoked the allocation (true after
// Close). It takes no lock (it runs around every copy through a
// mapping); like the mapping's memory, it must not run concurrently
// with Close.
func (v *ValidityView) Revoked() bool {
	w := v.word.Load()
	return w == nil || w.Load() != 0
}

// OwnerGone reports whether the owner revoked the allocation by closing
// (Validity.CloseGone) rather than by freeing it. Like Revoked, it must
// not run concurrently with Close.
func (v *ValidityView) OwnerGone() bool {
	w := v.word.Load()
	return w != nil && w.Load() == ownerGone
}

// Close unmaps the flag. Idempotent.
func (v *ValidityView) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil
	}
	v.closed = true
	v.word.Store(nil)
	err := unix.Munmap(v.mem)
	v.mem = nil
	return joinErr(err, nil)
}
