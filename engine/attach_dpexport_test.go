package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// The data path registers runtime memory with the fd its ExportDMABuf
// returns (ibv_reg_dmabuf_mr) while it holds the buffer. That fd must stay
// the pool's DMA-BUF until the data path drops it (Release), even when a
// Detach that gave up waiting for the buffer (CloseGrace) closes the
// attachment's own export meanwhile: else the registration would use a
// closed fd number, which the process may already have reused.
func TestAttachDataPathExportOutlivesDetach(t *testing.T) {
	for _, kernel := range []string{"6.5", "6.8"} {
		t.Run(kernel, func(t *testing.T) {
			_, rt := emulatedRuntime(t, kernel, hlsim.RuntimeConfig{PoolSize: 4 << 20})
			e := newEngine(t, Config{Devices: DevicesNone, RDMA: RDMAConfig{Disabled: true}, CloseGrace: 20 * time.Millisecond})
			a, err := e.Attach(AttachConfig{Target: rt.Target(), Anchor: rt.Anchor(), Copier: rt})
			require.NoError(t, err)
			b, err := a.Register(rt.Anchor().PoolStart+8192, 4096)
			require.NoError(t, err)
			require.NoError(t, b.acquire()) // an operation in flight, registering the buffer
			x, err := b.dp().ExportDMABuf()
			require.NoError(t, err)
			var before unix.Stat_t
			require.NoError(t, unix.Fstat(x.FD, &before))

			require.ErrorIs(t, a.Detach(), ErrTimeout, "the buffer is still held")
			var after unix.Stat_t
			err = unix.Fstat(x.FD, &after)
			require.NoError(t, err, "the data path's DMA-BUF fd was closed before its Release")
			require.Equal(t, [2]uint64{before.Dev, before.Ino}, [2]uint64{after.Dev, after.Ino}, "the fd names another file")

			if x.Release != nil {
				x.Release()
			}
			b.release()
			require.Zero(t, a.Stats().Buffers)
		})
	}
}
