package copier

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// rig is a Copier over two emulated devices, with memory made by hand
// (what the engine's buffers do).
type rig struct {
	c      *Copier
	gate   datapath.Gate
	closed atomic.Bool
	st     Counters
	refsMu sync.Mutex // refs is appended to by concurrent staged copies' AllocHost
	refs   []*atomic.Uint64
}

func newRig(t *testing.T, devices int) *rig { return newRigModel(t, devices, "") }

// newRigModel is newRig over emulators of model ("": Gaudi2).
func newRigModel(t *testing.T, devices int, model string) *rig {
	r := &rig{}
	r.gate.Init(&r.closed)
	c, err := New(Config{
		Logger: zerolog.Nop(), BaseLogger: zerolog.Nop(), Workers: 8, QueueDepth: 64, CBSize: 64 << 10,
		MaxOpsPerCS: 1024, ChunkSize: 4 << 20, ParallelCopyMin: 4 << 20, CloseGrace: time.Second,
		Gate: &r.gate, Stats: &r.st,
		AllocHost: r.hostMem,
		FreeHost:  func(m *Mem) error { r.c.Forget(m); return nil },
		Destroy:   func(*Mem) {},
	})
	require.NoError(t, err)
	r.c = c
	require.NoError(t, c.OpenDevices(Devices{Emulated: devices, Model: model, DRAMSize: 64 << 20}))
	t.Cleanup(func() {
		r.closed.Store(true)
		c.Stop()
		require.NoError(t, c.CloseDevices())
		require.NoError(t, c.CloseCaches())
		require.NoError(t, c.CloseSims())
	})
	return r
}

func (r *rig) mem(m *Mem) *Mem {
	m.Refs = new(atomic.Uint64)
	r.refsMu.Lock()
	r.refs = append(r.refs, m.Refs)
	r.refsMu.Unlock()
	return m
}

// allRefs is the reference counts of every mem made so far.
func (r *rig) allRefs() []*atomic.Uint64 {
	r.refsMu.Lock()
	defer r.refsMu.Unlock()
	return append([]*atomic.Uint64(nil), r.refs...)
}

// hostMem makes n bytes of host memory; it is the Config.AllocHost of the
// rig, safe for concurrent use (staging tasks call it at once).
func (r *rig) hostMem(n int) (*Mem, error) {
	b := make([]byte, n)
	m := r.mem(&Mem{Ptr: unsafe.Pointer(&b[0]), Addr: uint64(uintptr(unsafe.Pointer(&b[0]))), Size: uint64(n), Owner: b})
	return m, r.c.AddHost(m)
}

func (r *rig) host(t *testing.T, n int) *Mem {
	m, err := r.hostMem(n)
	require.NoError(t, err)
	return m
}

func (r *rig) gaudi(t *testing.T, dev, n int) *Mem {
	g := r.c.Devs[dev]
	dm, err := g.Dev.AllocDevice(uint64(n))
	require.NoError(t, err)
	t.Cleanup(func() { _ = dm.Free() })
	return r.mem(&Mem{Gaudi: true, Device: g, DMem: dm, Addr: dm.Addr(), Size: uint64(n)})
}

// copy runs one copy holding the references, as the engine does.
func (r *rig) copy(ctx context.Context, dst, src *Mem) error {
	dst.Refs.Add(1)
	src.Refs.Add(1)
	f := NewFuture(1)
	if err := r.c.Copy(ctx, f, Slice{M: dst, N: dst.Size}, Slice{M: src, N: src.Size}, time.Time{}); err != nil {
		return err
	}
	return f.Wait(context.Background())
}

// TestCopyRoundTrip: host -> gaudi0 -> gaudi1 (staged through host
// memory) -> host carries the bytes, every reference is dropped, and the
// counters count the three copies.
func TestCopyRoundTrip(t *testing.T) {
	r := newRig(t, 2)
	ctx := context.Background()
	const n = 5<<20 + 3 // two staging chunks
	src, out := r.host(t, n), r.host(t, n)
	for i, b := 0, src.Owner.([]byte); i < n; i++ {
		b[i] = byte(i * 7)
	}
	d0, d1 := r.gaudi(t, 0, n), r.gaudi(t, 1, n)
	require.NoError(t, r.copy(ctx, d0, src))
	require.NoError(t, r.copy(ctx, d1, d0))
	require.NoError(t, r.copy(ctx, out, d1))
	require.True(t, bytes.Equal(src.Owner.([]byte), out.Owner.([]byte)))
	for i, refs := range r.allRefs() {
		require.Zero(t, refs.Load(), "mem %d still referenced", i)
	}
	require.Equal(t, uint64(3), r.st.Completed.Load())
	require.NotZero(t, r.st.CS.Load())
}

// TestCopyCanceledWhileQueued: a copy whose ctx ended before a worker
// took it is dropped with ErrCanceled and its references released.
func TestCopyCanceledWhileQueued(t *testing.T) {
	r := newRig(t, 1)
	release := make(chan struct{})
	hook := func() { <-release }
	r.c.HookProcess.Store(&hook)
	src, d := r.host(t, 4096), r.gaudi(t, 0, 4096)
	ctx, cancel := context.WithCancel(context.Background())
	src.Refs.Add(1)
	d.Refs.Add(1)
	f := NewFuture(1)
	require.NoError(t, r.c.Copy(ctx, f, Slice{M: d, N: 4096}, Slice{M: src, N: 4096}, time.Time{}))
	cancel()
	close(release)
	require.ErrorIs(t, f.Wait(context.Background()), gxerr.Canceled)
	require.Zero(t, src.Refs.Load())
	require.Zero(t, d.Refs.Load())
	require.Equal(t, uint64(1), r.st.Failed.Load())
}
