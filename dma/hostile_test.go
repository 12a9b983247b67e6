package dma

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// openSim opens a Device on a new emulator of model, closed at the end of
// the test.
func openSim(t *testing.T, m hlsim.Model) *Device {
	t.Helper()
	sim, err := hlsim.New(hlsim.Config{Model: m, DRAMSize: 256 << 20,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestHugeCopySize: a copy or memset whose packet count overflows the
// rounding of linDMACount (sizes within 2 GiB of 2^64) does not fit a
// command buffer: ErrCBFull, nothing appended, no panic; Fits says no.
func TestHugeCopySize(t *testing.T) {
	sizes := []uint64{math.MaxUint64, math.MaxUint64 - MaxLinDMASize + 2}
	for _, m := range []hlsim.Model{hlsim.ModelGaudi2, hlsim.ModelGaudi3} {
		d := openSim(t, m)
		for _, size := range sizes {
			for _, op := range []struct {
				name string
				add  func(cb *CB) error
			}{
				{"AddLinDMA", func(cb *CB) error { return cb.AddLinDMA(0, 0, size) }},
				{"AddMemset", func(cb *CB) error { return cb.AddMemset(0, 0, size) }},
			} {
				cb, err := d.NewCB(4096)
				require.NoError(t, err)
				var addErr error
				require.NotPanics(t, func() { addErr = op.add(cb) }, "%v %s(%d)", m, op.name, size)
				require.ErrorIs(t, addErr, ErrCBFull, "%v %s(%d)", m, op.name, size)
				require.Zero(t, cb.Len(), "nothing appended")
				require.NoError(t, cb.Close())
			}
			cs, err := d.NewCSBuilder(CSOptions{Queues: d.H2DQueues(), CBSize: 4096})
			require.NoError(t, err)
			require.False(t, cs.Fits(size), "%v Fits(%d)", m, size)
			require.Greater(t, cs.Packets(size), cs.Capacity())
			var addErr error
			require.NotPanics(t, func() { addErr = cs.AddCopy(0, 0, size) })
			require.ErrorIs(t, addErr, ErrCBFull)
			cs.Release(nil)
		}
	}
}

// TestGaudi3SubmitForeignChunk: in direct mode Submit copies a chunk's
// packets from its command buffer. A chunk of a closed CB is refused with
// ErrClosed (its pages used to be unmapped: the copy faulted and killed
// the process), one of another Device's CB with ErrInvalid (its packets'
// completion writes target that device's scratch VA).
func TestGaudi3SubmitForeignChunk(t *testing.T) {
	d := openSim(t, hlsim.ModelGaudi3)
	other := openSim(t, hlsim.ModelGaudi3)
	m, err := d.AllocDevice(1 << 20)
	require.NoError(t, err)
	om, err := other.AllocDevice(1 << 20)
	require.NoError(t, err)
	q := d.H2DQueues()[0]
	for _, tc := range []struct {
		name  string
		chunk func() Chunk
		want  error
	}{
		{"closed CB", func() Chunk {
			cb, err := d.NewCB(4096)
			require.NoError(t, err)
			require.NoError(t, cb.AddMemset(m.Addr(), 0, 4096))
			c := cb.Chunk(q)
			require.NoError(t, cb.Close())
			return c
		}, ErrClosed},
		{"another device's CB", func() Chunk {
			cb, err := other.NewCB(4096)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, cb.Close()) })
			require.NoError(t, cb.AddMemset(om.Addr(), 0, 4096))
			return cb.Chunk(q)
		}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Submit([]Chunk{tc.chunk()})
			require.ErrorIs(t, err, tc.want)
		})
	}
	// The device still works.
	require.NoError(t, d.MemsetSync(m.Addr(), 0, 4096))
}

// TestCBPoolGetAfterDeviceClose: Device.Close releases the CBs a pool
// holds. Get then fails with ErrClosed (it returned a released CB with no
// buffer and a nil error), and a Get racing Close does not touch a CB
// Close is destroying.
func TestCBPoolGetAfterDeviceClose(t *testing.T) {
	for _, m := range []hlsim.Model{hlsim.ModelGaudi1, hlsim.ModelGaudi2, hlsim.ModelGaudi3} {
		t.Run(m.String(), func(t *testing.T) {
			d := openSim(t, m)
			p := d.NewCBPool(4096, 4)
			cb, err := p.Get()
			require.NoError(t, err)
			p.Put(cb)
			require.Equal(t, 1, p.Len())
			require.NoError(t, d.Close())
			got, err := p.Get()
			require.ErrorIs(t, err, ErrClosed)
			require.Nil(t, got)
			require.NoError(t, p.Close())

			// Racing: Get either wins (a live CB, emptied) or fails.
			d = openSim(t, m)
			p = d.NewCBPool(4096, 4)
			cb, err = p.Get()
			require.NoError(t, err)
			p.Put(cb)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); _ = d.Close() }()
			got, err = p.Get()
			wg.Wait()
			if err == nil {
				require.Same(t, cb, got)
			} else {
				require.ErrorIs(t, err, ErrClosed)
			}
		})
	}
}

// TestClosedCBRefusesPackets: adding packets to a closed command buffer
// (CB.Close or Device.Close) fails with ErrClosed, not ErrCBFull, which
// tells a caller to start another CB on a Device that is gone.
func TestClosedCBRefusesPackets(t *testing.T) {
	for _, m := range []hlsim.Model{hlsim.ModelGaudi1, hlsim.ModelGaudi2, hlsim.ModelGaudi3} {
		for _, byDevice := range []bool{false, true} {
			d := openSim(t, m)
			mem, err := d.AllocDevice(4096)
			require.NoError(t, err)
			cb, err := d.NewCB(4096)
			require.NoError(t, err)
			if byDevice {
				require.NoError(t, d.Close())
			} else {
				require.NoError(t, cb.Close())
			}
			for name, add := range map[string]func() error{
				"AddLinDMA": func() error { return cb.AddLinDMA(mem.Addr(), mem.Addr(), 64) },
				"AddMemset": func() error { return cb.AddMemset(mem.Addr(), 0, 64) },
				"AddNOP":    func() error { return cb.AddNOP(MB) },
			} {
				err := add()
				require.ErrorIs(t, err, ErrClosed, "%v %s (device closed: %v)", m, name, byDevice)
				require.NotErrorIs(t, err, ErrCBFull)
			}
		}
	}
}

// TestCBFillDuringDeviceClose: a goroutine filling a command buffer while
// another closes the Device. Close releases the CB (Gaudi1 munmaps the
// kernel CB, Gaudi2 unmaps and frees its pages): filling it then faulted
// and killed the process. Close waits for a fill in progress; later fills
// fail with ErrClosed.
func TestCBFillDuringDeviceClose(t *testing.T) {
	for _, m := range []hlsim.Model{hlsim.ModelGaudi1, hlsim.ModelGaudi2, hlsim.ModelGaudi3} {
		t.Run(m.String(), func(t *testing.T) {
			for range 100 {
				d := openSim(t, m)
				cb, err := d.NewCB(1 << 20)
				require.NoError(t, err)
				done := make(chan error, 1)
				go func() {
					for {
						err := cb.AddLinDMA(0x1000, 0x2000, 64)
						if err == nil {
							err = cb.AddNOP(0)
						}
						switch {
						case err == nil:
						case errors.Is(err, ErrCBFull):
							cb.Reset()
						default:
							done <- err
							return
						}
					}
				}()
				require.NoError(t, d.Close())
				require.ErrorIs(t, <-done, ErrClosed)
			}
		})
	}
}

// TestCBReadDuringDeviceClose: a CB's owner may read its size and bytes
// (Cap, Remaining, Len, Bytes, Chunk: what a CSBuilder does) while the
// Device closes, e.g. when the reset watcher releases the context.
// Close's release of the CB wrote the fields they read (a data race the
// soak hit: -race). After the release Bytes is empty.
func TestCBReadDuringDeviceClose(t *testing.T) {
	for _, m := range []hlsim.Model{hlsim.ModelGaudi1, hlsim.ModelGaudi2, hlsim.ModelGaudi3} {
		t.Run(m.String(), func(t *testing.T) {
			for range 50 {
				d := openSim(t, m)
				cb, err := d.NewCB(4096)
				require.NoError(t, err)
				require.NoError(t, cb.AddNOP(0))
				stop, started := make(chan struct{}), make(chan struct{})
				done := make(chan int)
				go func() {
					n := 0
					for i := 0; ; i++ {
						select {
						case <-stop:
							done <- n
							return
						default:
						}
						n += cb.Cap() + cb.Remaining() + cb.Len() + len(cb.Bytes()) + int(cb.Chunk(0).Size)
						if i == 0 {
							close(started)
						}
					}
				}()
				<-started
				require.NoError(t, d.Close())
				close(stop)
				require.Positive(t, <-done)
				require.Equal(t, 4096, cb.Cap(), "the capacity does not change")
				require.Empty(t, cb.Bytes(), "no bytes of a released buffer")
			}
		})
	}
}
