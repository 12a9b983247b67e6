package hlsim

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/lent"
)

func newTestRuntime(t *testing.T, m Model, kernel string, off uint64) (*Device, *Runtime) {
	t.Helper()
	d, err := New(Config{Model: m, DRAMSize: 128 << 20, Kernel: kernel})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	rt, err := d.NewRuntime(RuntimeConfig{PoolSize: 8 << 20, PoolOffset: off})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	return d, rt
}

func TestRuntimeCopies(t *testing.T) {
	for _, tc := range []struct {
		m      Model
		kernel string
		off    uint64
	}{{ModelGaudi2, "6.8", 0}, {ModelGaudi2, "6.5", 1<<20 + 100}, {ModelGaudi2, "6.1", 4096}, {ModelGaudi1, "6.1", 100}, {ModelGaudi1, "6.8", 0}} {
		t.Run(tc.m.String()+"/"+tc.kernel, func(t *testing.T) {
			d, rt := newTestRuntime(t, tc.m, tc.kernel, tc.off)
			an := rt.Anchor()
			require.Equal(t, an.MapVA+tc.off, an.PoolStart)
			ctx := context.Background()
			src := bytes.Repeat([]byte("runtime!"), 8192)
			require.NoError(t, rt.CopyHostToDevice(ctx, an.PoolStart+10, src))
			require.NoError(t, rt.CopyDeviceToDevice(ctx, an.PoolStart+4<<20, an.PoolStart+10, uint64(len(src))))
			got := make([]byte, len(src))
			require.NoError(t, rt.CopyDeviceToHost(ctx, got, an.PoolStart+4<<20))
			require.Equal(t, src, got)
			require.EqualValues(t, 3, rt.Stats().Copies)
			require.EqualValues(t, 3*len(src), rt.Stats().CopyBytes)
			require.Zero(t, d.Stats().CSSubmitted, "the runtime's copies are not device CSs")

			require.ErrorIs(t, rt.CopyHostToDevice(ctx, an.PoolStart+an.PoolLen-1, src[:2]), ErrRange)
			require.ErrorIs(t, rt.CopyDeviceToHost(ctx, got[:1], an.PoolStart-1), ErrRange)
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			require.ErrorIs(t, rt.CopyHostToDevice(cctx, an.PoolStart, src[:1]), context.Canceled)
		})
	}
}

// The lent handle counts what a borrower does: a positive control for the
// zero counts the attach tests assert.
func TestRuntimeLentHandleCounts(t *testing.T) {
	_, rt := newTestRuntime(t, ModelGaudi2, "6.8", 0)
	b := lent.Backend(rt.Target())
	require.Equal(t, "hlsim runtime", lent.Source(rt.Target()))
	require.Equal(t, -1, lent.FD(rt.Target()))
	_, err := hlsys.GetDeviceStatus(b)
	require.NoError(t, err)
	_, _ = hlsys.WaitForCS(b, 1, 0) // a WAIT_CS: counted as CS traffic
	_, err = hlsys.CBCreate(b, 4096, 0)
	require.NoError(t, err)
	_, err = hlsys.MemAlloc(b, 1<<20, 0, 0)
	require.NoError(t, err)
	f, err := hlsys.MemExportDMABuf(b, rt.Anchor().MapVA, 4096, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	st := rt.Stats()
	require.EqualValues(t, 5, st.LentIoctls)
	require.EqualValues(t, 2, st.LentCS)
	require.EqualValues(t, 1, st.LentMemOps)
	require.EqualValues(t, 1, st.LentExports)

	// Closing the lent handle closes the runtime's context, as closing its
	// fd would: that is what attached gxfer must never do.
	require.NoError(t, rt.Usable())
	require.NoError(t, b.Close())
	require.EqualValues(t, 1, rt.Stats().LentCloses)
	require.Error(t, rt.Usable())
	require.Error(t, rt.Close(), "the runtime finds its context gone")
}

func TestRuntimeUnmapWaitsForExports(t *testing.T) {
	_, rt := newTestRuntime(t, ModelGaudi2, "6.8", 0)
	require.NoError(t, rt.CopyHostToDevice(context.Background(), rt.Anchor().PoolStart, []byte{1})) // the runtime's own export
	f, err := hlsys.MemExportDMABuf(lent.Backend(rt.Target()), rt.Anchor().MapVA, 1<<20, 0)
	require.NoError(t, err)
	require.ErrorIs(t, rt.Unmap(), unix.EINVAL, "a borrower's export pins the pool")
	require.NoError(t, f.Close())
	require.NoError(t, rt.Unmap(), "the runtime's own export is closed by Unmap")
	require.NoError(t, rt.Unmap())
	require.ErrorIs(t, rt.CopyHostToDevice(context.Background(), rt.Anchor().PoolStart, []byte{1}), unix.ENODEV)
	require.NoError(t, rt.Close())
	require.NoError(t, rt.Close())
}

// TestRuntimeUnmapDuringCopies: an Unmap racing the runtime's own copies
// waits for them. A copy either completes or finds the pool gone (ENODEV);
// it never uses the export's fd number after Unmap closed it (EBADF, or a
// read or write through a descriptor the number now names), and Unmap is
// not refused because a copy still had the export open.
func TestRuntimeUnmapDuringCopies(t *testing.T) {
	const n = 2 << 20
	for round := range 8 {
		_, rt := newTestRuntime(t, ModelGaudi2, "6.8", 0)
		an := rt.Anchor()
		ctx := context.Background()
		errs := make(chan error, 2)
		started := make(chan struct{}, 2)
		for range 2 {
			go func() {
				for i := 0; ; i++ {
					err := rt.CopyDeviceToDevice(ctx, an.PoolStart+4<<20, an.PoolStart, n)
					if i == 0 {
						started <- struct{}{}
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		<-started
		<-started
		require.NoError(t, rt.Unmap(), "round %d", round)
		for range 2 {
			select {
			case err := <-errs:
				require.ErrorIs(t, err, unix.ENODEV, "round %d", round)
			case <-time.After(safety):
				require.FailNow(t, "a copy did not end after Unmap")
			}
		}
	}
}
