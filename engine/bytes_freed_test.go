package engine

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBytesAfterFree: Bytes of a freed buffer (Free, Deregister, or the
// engine's Close) is nil. An allocated buffer's Bytes gave a slice of
// memory Free had unmapped (touching it killed the process with
// SIGSEGV), and a registered buffer's Bytes raced with its Deregister
// (which cleared the field Bytes reads).
func TestBytesAfterFree(t *testing.T) {
	for _, tc := range []struct {
		name  string
		make  func(e *Engine) (*Buffer, error)
		close bool // the engine's Close frees it, not Free
	}{
		{"alloc", func(e *Engine) (*Buffer, error) { return e.Alloc(4096, Host) }, false},
		{"register", func(e *Engine) (*Buffer, error) { return e.Register(make([]byte, 4096)) }, false},
		{"alloc, closed", func(e *Engine) (*Buffer, error) { return e.Alloc(4096, Host) }, true},
		{"register, closed", func(e *Engine) (*Buffer, error) { return e.Register(make([]byte, 4096)) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			for range 20 {
				b, err := tc.make(e)
				require.NoError(t, err)
				require.Len(t, b.Bytes(), 4096)
				// Bytes called while the buffer is freed (the race
				// detector sees a write Bytes races with).
				var wg sync.WaitGroup
				wg.Go(func() {
					for range 100 {
						_ = b.Bytes()
					}
				})
				if tc.close {
					require.NoError(t, e.Close())
				} else {
					require.NoError(t, b.Free())
				}
				wg.Wait()
				// Not require.Nil: its message would print the
				// slice, reading the unmapped memory.
				require.True(t, b.Bytes() == nil, "Bytes of a freed buffer is not nil")
				if tc.close {
					break
				}
			}
		})
	}
}
