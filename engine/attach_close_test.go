package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// Detach is idempotent, and "closes the pool's DMA-BUF before it returns":
// a second Detach (or Engine.Close) made while the first is still waiting
// for a busy buffer must not return before the DMA-BUF is closed.
func TestAttachConcurrentDetachWaitsForTheExportClose(t *testing.T) {
	x := newAttached(t, "6.8", 0, true)
	b, err := x.a.Register(x.rt.Anchor().PoolStart, 1<<20)
	require.NoError(t, err)
	d, err := b.ExportDMABuf() // holds the buffer: the first Detach waits CloseGrace
	require.NoError(t, err)
	first := make(chan error, 1)
	go func() { first <- x.a.Detach() }()
	for !x.a.rt.Detached() {
		time.Sleep(time.Millisecond)
	}
	err = x.a.Detach()
	live := x.a.Stats().Export.Live
	d.Release()
	<-first
	require.NoError(t, err)
	require.False(t, live, "the second Detach returned while the pool's DMA-BUF was still open")
}

// blockingCopier is a runtime copier whose copies end only when their
// context does (a stuck stream, a runtime waiting on a device).
type blockingCopier struct{ started, stop chan struct{} }

func (c blockingCopier) wait(ctx context.Context) error {
	c.started <- struct{}{}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stop: // the test gives up
		return context.Canceled
	}
}
func (c blockingCopier) CopyHostToDevice(ctx context.Context, _ uint64, _ []byte) error {
	return c.wait(ctx)
}
func (c blockingCopier) CopyDeviceToHost(ctx context.Context, _ []byte, _ uint64) error {
	return c.wait(ctx)
}
func (c blockingCopier) CopyDeviceToDevice(ctx context.Context, _, _, _ uint64) error {
	return c.wait(ctx)
}

// Close gives a copy on a device CloseGrace: a copy in the runtime's
// copier must be told to stop (its context canceled) rather than make
// Close wait for ever.
func TestCloseCancelsRuntimeCopierAfterGrace(t *testing.T) {
	_, rt := emulatedRuntime(t, "6.8", hlsim.RuntimeConfig{PoolSize: 4 << 20})
	e, err := New(Config{Devices: DevicesNone, RDMA: RDMAConfig{Disabled: true}, CloseGrace: 100 * time.Millisecond})
	require.NoError(t, err)
	cp := blockingCopier{started: make(chan struct{}, 1), stop: make(chan struct{})}
	a, err := e.Attach(AttachConfig{Target: rt.Target(), Anchor: rt.Anchor(), Copier: cp})
	require.NoError(t, err)
	dev, err := a.Register(rt.Anchor().PoolStart, 4096)
	require.NoError(t, err)
	host, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	f := e.Copy(context.Background(), dev.All(), host.All())
	<-cp.started
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		close(cp.stop) // unblock the copier so the test ends (and leaks nothing)
		<-closed
		t.Fatal("Engine.Close still waiting for the runtime copier 5 s after Close (CloseGrace 100 ms)")
	}
	require.ErrorIs(t, f.Wait(context.Background()), ErrClosed)
}

// Detach "frees every buffer registered on the attachment ... before it
// returns", and the runtime may release its device (and free the tensors)
// once it has: a copy still in the runtime's copier after CloseGrace must
// be told to stop (its context canceled) and have returned before Detach
// does, as Engine.Close does for every attachment.
func TestDetachCancelsRuntimeCopierAfterGrace(t *testing.T) {
	for _, tc := range []struct {
		name string
		copy func(e *Engine, dev, host *Buffer) *Future
	}{
		{"host to runtime", func(e *Engine, dev, host *Buffer) *Future { return e.Copy(context.Background(), dev.All(), host.All()) }},
		{"runtime to host", func(e *Engine, dev, host *Buffer) *Future { return e.Copy(context.Background(), host.All(), dev.All()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rt := emulatedRuntime(t, "6.8", hlsim.RuntimeConfig{PoolSize: 4 << 20})
			e := newEngine(t, Config{Devices: DevicesNone, RDMA: RDMAConfig{Disabled: true}, CloseGrace: 100 * time.Millisecond})
			cp := blockingCopier{started: make(chan struct{}, 1), stop: make(chan struct{})}
			var returned atomic.Int32 // copier calls that have returned
			a, err := e.Attach(AttachConfig{Target: rt.Target(), Anchor: rt.Anchor(), Copier: countingCopier{cp, &returned}})
			require.NoError(t, err)
			dev, err := a.Register(rt.Anchor().PoolStart, 4096)
			require.NoError(t, err)
			host, err := e.Alloc(4096, Host)
			require.NoError(t, err)
			f := tc.copy(e, dev, host)
			<-cp.started
			detached := make(chan error, 1)
			go func() { detached <- a.Detach() }()
			var derr error
			select {
			case derr = <-detached:
			case <-time.After(5 * time.Second):
				close(cp.stop)
				<-detached
				t.Fatal("Detach still waiting for the runtime copier 5 s after it began (CloseGrace 100 ms)")
			}
			stillRunning := returned.Load() == 0
			if stillRunning {
				close(cp.stop) // let the test end
			}
			require.False(t, stillRunning, "Detach returned (%v) while the runtime's copier was still copying attached memory", derr)
			require.ErrorIs(t, f.Wait(context.Background()), ErrClosed)
			require.Zero(t, a.Stats().Buffers, "buffers left registered after Detach")
		})
	}
}

// countingCopier counts the calls of a copier that have returned.
type countingCopier struct {
	c DeviceCopier
	n *atomic.Int32
}

func (c countingCopier) CopyHostToDevice(ctx context.Context, dst uint64, src []byte) error {
	defer c.n.Add(1)
	return c.c.CopyHostToDevice(ctx, dst, src)
}
func (c countingCopier) CopyDeviceToHost(ctx context.Context, dst []byte, src uint64) error {
	defer c.n.Add(1)
	return c.c.CopyDeviceToHost(ctx, dst, src)
}
func (c countingCopier) CopyDeviceToDevice(ctx context.Context, dst, src, n uint64) error {
	defer c.n.Add(1)
	return c.c.CopyDeviceToDevice(ctx, dst, src, n)
}

// TestAttachRegisterDuringClose: Attachment.Register is admitted through
// the close gate, as Alloc and Engine.Register are, so a Register under
// way when Close begins is over before Close collects the live buffers,
// and the buffer it returns is released by Close. It checked only the
// closed flag: a Register that passed it added its buffer after Close's
// collection, and returned it live after Close had returned.
func TestAttachRegisterDuringClose(t *testing.T) {
	x := newAttached(t, "6.8", 0, false)
	e := x.e
	in := make(chan struct{})
	hook := func() {
		close(in)
		for !e.closed.Load() {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(50 * time.Millisecond) // Close would collect the buffers now
	}
	e.hookAlloc.Store(&hook)
	var b *Buffer
	var rerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, rerr = x.a.Register(x.rt.Anchor().PoolStart, 4096)
	}()
	select {
	case <-in:
	case <-done:
		t.Fatal("Register returned without being admitted through the close gate")
	}
	require.NoError(t, e.Close())
	<-done
	if rerr != nil {
		require.ErrorIs(t, rerr, ErrClosed)
		return
	}
	require.True(t, b.released.Load(), "a buffer registered while Close ran is still alive after it returned")
}
