package rdma

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Buffer is page-aligned anonymous memory outside the Go heap, suitable for
// Register. Close unmaps it; close its MRs first.
type Buffer struct {
	mu   sync.Mutex
	b    []byte
	full []byte // as mapped (unix.Munmap wants the slice Mmap returned)
}

// NewBuffer maps size bytes (rounded up to the page size), zeroed.
func NewBuffer(size int) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: buffer size %d", ErrInvalid, size)
	}
	ps := os.Getpagesize()
	n := (size + ps - 1) / ps * ps
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("rdma: mmap %d bytes: %w", n, err)
	}
	return &Buffer{b: b[:size:size], full: b}, nil
}

// Bytes is the buffer's memory (nil after Close).
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b
}

// Close unmaps the buffer. A second Close returns nil.
func (b *Buffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b == nil {
		return nil
	}
	full := b.full
	b.b, b.full = nil, nil
	if err := unix.Munmap(full); err != nil {
		return fmt.Errorf("rdma: munmap: %w", err)
	}
	return nil
}
