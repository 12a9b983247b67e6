package engine

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// csQueueRec records the queue of every CS chunk sent through a backend.
type csQueueRec struct {
	hlsys.Backend
	mu     sync.Mutex
	queues map[uint32]int
}

func (r *csQueueRec) KernelRelease() string {
	return r.Backend.(interface{ KernelRelease() string }).KernelRelease()
}

func (r *csQueueRec) Ioctl(req uintptr, arg unsafe.Pointer) error {
	if _, nr, _ := hlsys.Decode(req); nr == hlsys.IoctlCS {
		a := (*hlsys.CSArgs)(arg)
		p := *(*unsafe.Pointer)(unsafe.Pointer(&a.In.ChunksExecute))
		chunks := unsafe.Slice((*hlsys.CSChunk)(p), a.In.NumChunksExecute)
		r.mu.Lock()
		for _, c := range chunks {
			r.queues[c.QueueIndex]++
		}
		r.mu.Unlock()
	}
	return r.Backend.Ioctl(req, arg)
}

// TestGaudi2CSQueuesDriverEnabled: the engine's command submissions on a
// Gaudi2, in every direction, go only to the PDMA streams the driver opens
// to user CBs (gaudi2.c gaudi2_is_queue_enabled: PDMA_0_0, PDMA_0_1,
// PDMA_1_0 = ids 0, 1, 4). Before the fix H2D/D2D spread over 0-3 and
// D2H over 4-7, which the driver refuses with EINVAL. The engine takes its
// queue sets from package dma; this checks what reaches the ioctl.
func TestGaudi2CSQueuesDriverEnabled(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 256 << 20})
	require.NoError(t, err)
	e.cp.Sims = append(e.cp.Sims, sim) // closed by the engine
	rec := &csQueueRec{queues: map[uint32]int{}}
	d, err := dma.OpenBackend(sim.Name(), func() (dma.Backend, error) {
		b, err := sim.Open()
		if err != nil {
			return nil, err
		}
		rec.Backend = b.(hlsys.Backend) // the emulator's context is one
		return rec, nil
	}, dma.Options{})
	require.NoError(t, err)
	e.cp.AddDevice(d, sim)

	ctx := context.Background()
	const size = 9<<20 + 5 // several chunks per copy: every stream of a set is used
	src, err := e.Alloc(size, Host)
	require.NoError(t, err)
	fill(src.Bytes(), 15)
	g1, err := e.Alloc(size, Gaudi(0))
	require.NoError(t, err)
	g2, err := e.Alloc(size, Gaudi(0))
	require.NoError(t, err)
	out, err := e.Alloc(size, Host)
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, e.CopySync(ctx, g1.All(), src.All()))
		require.NoError(t, e.CopySync(ctx, g2.All(), g1.All()))
		require.NoError(t, e.CopySync(ctx, out.All(), g2.All()))
		require.True(t, bytes.Equal(src.Bytes(), out.Bytes()))
	}
	for _, b := range []*Buffer{src, g1, g2, out} {
		require.NoError(t, b.Free())
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.queues)
	for q, n := range rec.queues {
		require.True(t, slices.Contains([]uint32{0, 1, 4}, q), "%d CS chunk(s) on Gaudi2 queue %d, which the driver keeps for the ARC firmware", n, q)
	}
	require.NotZero(t, rec.queues[4], "device-to-host copies on PDMA_1_0")
}
