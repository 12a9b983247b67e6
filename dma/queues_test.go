package dma

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// gaudi2UserQueues are the only PCI DMA queue ids the Gaudi2 driver takes a
// user CB on: gaudi2_is_queue_enabled (gaudi2.c) accepts PDMA_0_0,
// PDMA_0_1 and PDMA_1_0; gaudi2_validate_cb_address fails every other PDMA
// id with EINVAL. Written out here, not read from queueTable, so the test
// does not trust the code it checks.
var gaudi2UserQueues = []uint32{0, 1, 4}

// TestGaudi2QueuesAreDriverEnabled: every queue the package hands out for
// Gaudi2, and every queue a CS actually goes to, is 0, 1 or 4 (before the
// fix H2D/D2D used 0-3 and D2H 4-7). No emulator involved.
func TestGaudi2QueuesAreDriverEnabled(t *testing.T) {
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	for name, set := range map[string][]uint32{"H2D": d.H2DQueues(), "D2H": d.D2HQueues(), "D2D": d.D2DQueues()} {
		require.NotEmpty(t, set, name)
		for _, q := range set {
			require.Contains(t, gaudi2UserQueues, q, "%s queue %d is disabled for user CBs on Gaudi2", name, q)
		}
	}
	// Two directions never share an engine's stream set: H2D on PDMA_0, D2H on PDMA_1.
	for _, q := range d.D2HQueues() {
		require.NotContains(t, d.H2DQueues(), q)
	}

	dev, err := d.AllocDevice(1 << 20)
	require.NoError(t, err)
	host, err := AllocHostPages(1 << 20)
	require.NoError(t, err)
	defer func() { require.NoError(t, FreeHostPages(host)) }()
	hm, err := d.MapHostBytes(host)
	require.NoError(t, err)
	for range 16 { // more than any set's length: every round-robin slot is used
		require.NoError(t, d.CopySync(dev.Addr(), hm.DeviceAddr(), 64))
		require.NoError(t, d.CopySync(hm.DeviceAddr(), dev.Addr(), 64))
		require.NoError(t, d.CopySync(dev.Addr()+4096, dev.Addr(), 64))
		require.NoError(t, d.MemsetSync(dev.Addr(), 0, 64))
		require.NoError(t, d.MemsetSync(hm.DeviceAddr(), 0, 64))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.csChunks, 16*5)
	for _, cs := range f.csChunks {
		for _, c := range cs {
			require.Contains(t, gaudi2UserQueues, c.QueueIndex)
		}
	}
}

// TestGaudi1QueuesAreExternal: Gaudi1 keeps its eight external PCI DMA
// streams (gaudi.c gaudi_queue_type: DMA_0_0..DMA_1_3 QUEUE_TYPE_EXT, ids
// 0-7), H2D on DMA_0 and D2H on DMA_1.
func TestGaudi1QueuesAreExternal(t *testing.T) {
	d, _ := openFake(t, ModelGaudi1, hlsys.Legacy, "6.1")
	require.Equal(t, []uint32{0, 1, 2, 3}, d.H2DQueues())
	require.Equal(t, []uint32{4, 5, 6, 7}, d.D2HQueues())
	require.Equal(t, []uint32{0, 1, 2, 3}, d.D2DQueues())
	// The sets are copies: a caller cannot edit the table.
	d.H2DQueues()[0] = 99
	require.Equal(t, uint32(0), d.H2DQueues()[0])
}

// queueRec records the queue of every CS chunk a backend receives.
type queueRec struct {
	hlsys.Backend
	mu     sync.Mutex
	queues []uint32
}

func (r *queueRec) KernelRelease() string {
	return r.Backend.(interface{ KernelRelease() string }).KernelRelease()
}

func (r *queueRec) Ioctl(req uintptr, arg unsafe.Pointer) error {
	if _, nr, _ := hlsys.Decode(req); nr == hlsys.IoctlCS {
		a := (*hlsys.CSArgs)(arg)
		chunks := unsafe.Slice((*hlsys.CSChunk)(ptrField(&a.In.ChunksExecute)), a.In.NumChunksExecute)
		r.mu.Lock()
		for _, c := range chunks {
			r.queues = append(r.queues, c.QueueIndex)
		}
		r.mu.Unlock()
	}
	return r.Backend.Ioctl(req, arg)
}

// TestGaudi2CopiesOnEnabledQueuesHlsim runs copies in every direction on an
// emulated Gaudi2 (both uAPI generations) and checks that they succeed and
// that every CS went to queue 0, 1 or 4. hlsim refuses a user CB on the
// disabled PDMA streams as the driver does.
func TestGaudi2CopiesOnEnabledQueuesHlsim(t *testing.T) {
	for _, kernel := range []string{"6.5", "6.8"} {
		t.Run("kernel"+kernel, func(t *testing.T) {
			sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 64 << 20, Kernel: kernel})
			require.NoError(t, err)
			defer func() { require.NoError(t, sim.Close()) }()
			rec := &queueRec{}
			d, err := OpenBackend(sim.Name(), func() (hlsys.Backend, error) {
				b, err := simOpen(sim)()
				if err != nil {
					return nil, err
				}
				rec.Backend = b
				return rec, nil
			}, Options{})
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()

			const n = 64 << 10
			dev, err := d.AllocDevice(2 * n)
			require.NoError(t, err)
			host, err := AllocHostPages(2 * n)
			require.NoError(t, err)
			defer func() { require.NoError(t, FreeHostPages(host)) }()
			hm, err := d.MapHostBytes(host)
			require.NoError(t, err)
			for i := range host[:n] {
				host[i] = byte(i * 7)
			}
			for i := range 8 {
				msg := fmt.Sprintf("round %d", i)
				require.NoError(t, d.CopySync(dev.Addr(), hm.DeviceAddr(), n), msg)     // H2D
				require.NoError(t, d.CopySync(dev.Addr()+n, dev.Addr(), n), msg)        // D2D
				require.NoError(t, d.CopySync(hm.DeviceAddr()+n, dev.Addr()+n, n), msg) // D2H
				require.Equal(t, host[:n], host[n:], msg)
				clear(host[n:])
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			require.Len(t, rec.queues, 24)
			for _, q := range rec.queues {
				require.True(t, slices.Contains(gaudi2UserQueues, q), "CS on disabled queue %d", q)
			}
		})
	}
}
