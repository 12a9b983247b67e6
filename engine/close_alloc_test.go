package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAllocDuringClose: a buffer allocated or registered by a call that
// got in before Close began is released by Close, not left alive (its
// shared memory mapped, its registration held) after Close returns. The
// hook holds the call until Close has begun, and then for longer than
// Close takes to collect the live buffers.
func TestAllocDuringClose(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alloc func(e *Engine) (*Buffer, error)
	}{
		{"host", func(e *Engine) (*Buffer, error) { return e.Alloc(64<<10, Host) }},
		{"gaudi", func(e *Engine) (*Buffer, error) { return e.Alloc(64<<10, Gaudi(0)) }},
		{"register", func(e *Engine) (*Buffer, error) { return e.Register(make([]byte, 4096)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
			require.NoError(t, err)
			in := make(chan struct{})
			hook := func() {
				close(in)
				for !e.closed.Load() {
					time.Sleep(100 * time.Microsecond)
				}
				time.Sleep(50 * time.Millisecond)
			}
			e.hookAlloc.Store(&hook)
			var b *Buffer
			var aerr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				b, aerr = tc.alloc(e)
			}()
			<-in
			require.NoError(t, e.Close())
			<-done
			if aerr != nil {
				require.ErrorIs(t, aerr, ErrClosed)
				return
			}
			require.True(t, b.released.Load(), "a buffer allocated while Close ran is still alive after it returned")
			_, err = e.Alloc(4096, Host)
			require.ErrorIs(t, err, ErrClosed)
		})
	}
}

// TestReleaseAfterCloseKeepsBufferFreed: a DMA-BUF reference released
// after Close does not bring its buffer back to life (Close marked it
// freed; the late release used to clear the mark by underflow).
func TestReleaseAfterCloseKeepsBufferFreed(t *testing.T) {
	e, err := New(Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 1 << 30}})
	require.NoError(t, err)
	d, err := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	x, err := d.ExportDMABuf()
	require.NoError(t, err)
	require.NoError(t, e.Close())
	x.Release()
	_, err = d.ExportDMABuf()
	require.ErrorIs(t, err, ErrClosed)
	_, err = d.Export()
	require.Error(t, err)
	require.NotZero(t, d.state.Load()&freedBit, "the buffer is still marked freed")
}
