package dptest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// TestEnv: DMAs copy and are counted while they run; Copy drops what a
// ended ctx has not started; host buffers cannot be freed while held.
func TestEnv(t *testing.T) {
	e := &Env{}
	dev := e.NewBuf(16, true)
	copy(dev.Bytes(), "0123456789abcdef")
	h, err := e.AllocHost(8)
	require.NoError(t, err)
	w := e.DMA(datapath.Mem{B: h, Len: 8}, datapath.Mem{B: dev, Off: 4, Len: 8}, time.Time{})
	require.NoError(t, w.Wait(context.Background()))
	require.Equal(t, "456789ab", string(h.HostBytes()))
	require.Nil(t, dev.HostBytes())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, e.Copy(ctx, datapath.Mem{B: h, Len: 8}, datapath.Mem{B: dev, Len: 8}, time.Time{}).Wait(context.Background()), gxerr.Canceled)
	require.Equal(t, int32(1), e.DMAs())
	require.NoError(t, h.Acquire())
	require.Error(t, e.FreeHost(h))
	h.Release()
	require.NoError(t, e.FreeHost(h))
	require.ErrorIs(t, h.Acquire(), gxerr.Freed)
	require.Zero(t, e.Allocated())
	e.Wait()
}
