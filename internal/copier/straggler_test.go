package copier

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// TestStopWorkerOutlivesPool: a drain worker still running when Stop
// gives up waiting for the pool (CloseGrace plus a second) submits its CS
// after the completion actor closed, and waits for it in its own
// goroutine. CloseDevices must not then close the device the way that
// unmaps and frees memory under that CS (Device.Close): the device's DMA
// engine would fault on the unmapped host range, and on hardware write
// into freed memory.
func TestStopWorkerOutlivesPool(t *testing.T) {
	var gate datapath.Gate
	var closed atomic.Bool
	gate.Init(&closed)
	var st Counters
	c, err := New(Config{
		Logger: zerolog.Nop(), BaseLogger: zerolog.Nop(), Workers: 4, QueueDepth: 16, CBSize: 64 << 10,
		MaxOpsPerCS: 16, ChunkSize: 4 << 20, ParallelCopyMin: 4 << 20, CloseGrace: 100 * time.Millisecond,
		Gate: &gate, Stats: &st, Destroy: func(*Mem) {},
	})
	require.NoError(t, err)
	const n = 256 << 20 // a CS that runs well past CloseGrace
	require.NoError(t, c.OpenDevices(Devices{Emulated: 1, DRAMSize: 2 * n}))
	g, sim := c.Devs[0], c.Sims[0]

	buf := make([]byte, n)
	src := &Mem{Ptr: unsafe.Pointer(&buf[0]), Addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), Size: n, Refs: new(atomic.Uint64)}
	require.NoError(t, c.AddHost(src))
	dm, err := g.Dev.AllocDevice(n)
	require.NoError(t, err)
	dst := &Mem{Gaudi: true, Device: g, DMem: dm, Addr: dm.Addr(), Size: n, Refs: new(atomic.Uint64)}

	// The worker is held until the actor has closed: a worker the pool's
	// release timeout left behind.
	entered := make(chan struct{})
	hook := func() {
		close(entered)
		for {
			g.aband.mu.Lock()
			done := g.aband.closed
			g.aband.mu.Unlock()
			if done {
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	c.HookProcess.Store(&hook)
	src.Refs.Add(1)
	dst.Refs.Add(1)
	f := NewFuture(1)
	require.NoError(t, c.Copy(context.Background(), f, Slice{M: dst, N: n}, Slice{M: src, N: n}, time.Time{}))
	<-entered

	closed.Store(true)
	c.Stop()
	// The engine closes the devices right after Stop; here, once the
	// straggler's CS is on the device.
	for sim.Stats().CSSubmitted == 0 && !f.IsDone() {
		time.Sleep(100 * time.Microsecond)
	}
	cerr := c.CloseDevices()
	err = f.Wait(context.Background())
	t.Logf("copy: %v; close: %v", err, cerr)
	if err != nil { // else the CS ended within the worker's wait for it
		require.ErrorIs(t, err, gxerr.Closed)
	}
	require.NoError(t, c.CloseCaches())
	require.NoError(t, c.CloseSims())
	require.Zero(t, sim.Stats().EngineFaults, "the device ran into memory CloseDevices released")
	require.Zero(t, src.Refs.Load())
	require.Zero(t, dst.Refs.Load())
}
