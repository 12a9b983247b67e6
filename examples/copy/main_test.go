package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func emulated() engine.Config {
	return engine.Config{Devices: engine.DevicesEmulated, Emulator: engine.EmulatorConfig{DRAMSize: 256 << 20}}
}

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, emulated(), nil))
	require.Contains(t, out.String(), "emulated")
	require.Contains(t, out.String(), "verified")
}

// TestRunCatchesMovedBytes: the round trip's check sees bytes that came
// back at the wrong offset, such as the halves of the device buffer
// swapped (the engine splits the copy into 4 MiB chunks over the DMA
// queues) or a shift by a multiple of 256 bytes.
func TestRunCatchesMovedBytes(t *testing.T) {
	const size, half = 8 << 20, 4 << 20
	for _, tc := range []struct {
		name       string
		dst, src   int // device offsets: n bytes from src are copied to dst
		n          int
		swapHalves bool
	}{
		{name: "halves swapped", swapHalves: true},
		{name: "shifted 256 B", dst: 256, src: 0, n: size - 256},
		{name: "shifted 4 KiB", dst: 0, src: 4096, n: size - 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			move := func(eng *engine.Engine, hbm *engine.Buffer) error {
				ctx := context.Background()
				tmp, err := eng.Alloc(size, engine.Host)
				if err != nil {
					return err
				}
				defer tmp.Free()
				if err := eng.CopySync(ctx, tmp.All(), hbm.All()); err != nil {
					return err
				}
				if tc.swapHalves {
					if err := eng.CopySync(ctx, hbm.Slice(0, half), tmp.Slice(half, half)); err != nil {
						return err
					}
					return eng.CopySync(ctx, hbm.Slice(half, half), tmp.Slice(0, half))
				}
				return eng.CopySync(ctx, hbm.Slice(tc.dst, tc.n), tmp.Slice(tc.src, tc.n))
			}
			err := run(&bytes.Buffer{}, emulated(), move)
			require.Error(t, err)
			require.Contains(t, err.Error(), "data mismatch")
		})
	}
}
