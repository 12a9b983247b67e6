package engine

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
)

// Engine.Attach refuses bad input with the engine's typed errors (the
// sentinels every other engine call returns), not only package dma's:
// a caller matching errors.Is(err, engine.ErrInvalid) must see a bad
// anchor or a bad fd as bad input.
func TestAttachRefusalsAreTyped(t *testing.T) {
	null, err := os.Open("/dev/null")
	require.NoError(t, err)
	defer null.Close()
	for _, tc := range []struct {
		name   string
		kernel string
		target func(rt *hlsim.Runtime) dma.AttachTarget
		anchor func(a dma.PoolAnchor) dma.PoolAnchor
		want   error
		asked  bool // the driver saw the export (and refused it)
	}{
		{"empty pool", "6.8", nil, func(a dma.PoolAnchor) dma.PoolAnchor { a.PoolLen = 0; return a }, ErrInvalid, false},
		{"pool wraps around", "6.8", nil, func(a dma.PoolAnchor) dma.PoolAnchor { a.PoolLen = ^uint64(0); return a }, ErrInvalid, false},
		{"pool starts before the map VA", "6.8", nil, func(a dma.PoolAnchor) dma.PoolAnchor { a.PoolStart = a.MapVA - 4096; return a }, ErrInvalid, false},
		{"map VA not page aligned", "6.8", nil, func(a dma.PoolAnchor) dma.PoolAnchor { a.MapVA++; a.PoolStart++; return a }, ErrInvalid, false},
		{"map VA the driver does not know", "6.8", nil, func(a dma.PoolAnchor) dma.PoolAnchor {
			a.MapVA += 1 << 20
			a.PoolStart += 1 << 20
			a.PoolLen = 1 << 20
			return a
		}, ErrInvalid, true},
		{"fd that is not a habanalabs node", "6.8", func(*hlsim.Runtime) dma.AttachTarget { return dma.BorrowFD(int(null.Fd())) }, nil, ErrInvalid, false},
		{"6.1 export API", "6.1", nil, nil, ErrNotSupported, false},
		{"no runtime in this process", "6.8", func(*hlsim.Runtime) dma.AttachTarget { return dma.AttachTarget{} }, nil, ErrNoDevice, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rt := emulatedRuntime(t, tc.kernel, hlsim.RuntimeConfig{PoolSize: 4 << 20, PoolOffset: 1 << 20})
			e := newEngine(t, Config{Devices: DevicesNone, RDMA: RDMAConfig{Disabled: true}})
			cfg := AttachConfig{Target: rt.Target(), Anchor: rt.Anchor(), Copier: rt}
			if tc.target != nil {
				cfg.Target = tc.target(rt)
			}
			if tc.anchor != nil {
				cfg.Anchor = tc.anchor(cfg.Anchor)
			}
			a, err := e.Attach(cfg)
			require.Nil(t, a)
			require.ErrorIs(t, err, tc.want)
			require.Empty(t, e.Devices(), "a refused attachment is listed")
			if !tc.asked {
				require.Zero(t, rt.Stats().LentExports, "refused before asking the driver")
			}
		})
	}
}
