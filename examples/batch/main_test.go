package main

import (
	"bytes"
	"context"
	"fmt"
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
	require.Contains(t, out.String(), "all 256 blocks verified")
}

// TestRunCatchesAnyBadBlock: a block spoiled on the device is reported,
// whichever it is (the example used to check block 5 only).
func TestRunCatchesAnyBadBlock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block int
	}{{"first", 0}, {"middle", 100}, {"last", 255}} {
		t.Run(tc.name, func(t *testing.T) {
			const block = 16 << 10
			spoil := func(eng *engine.Engine, hbm *engine.Buffer) error {
				zero, err := eng.Alloc(block, engine.Host)
				if err != nil {
					return err
				}
				defer zero.Free()
				slot := (tc.block * 37) % 256
				return eng.CopySync(context.Background(), hbm.Slice(slot*block, block), zero.All())
			}
			err := run(&bytes.Buffer{}, emulated(), spoil)
			require.Error(t, err)
			require.Contains(t, err.Error(), fmt.Sprintf("block %d byte", tc.block))
		})
	}
}

// TestRunCatchesMisplacedBlock: two blocks swapped on the device (each
// landed in the other's slot) are reported: every block's bytes must be its
// own, not a copy of its neighbour's.
func TestRunCatchesMisplacedBlock(t *testing.T) {
	const block = 16 << 10
	swap := func(eng *engine.Engine, hbm *engine.Buffer) error {
		ctx := context.Background()
		tmp, err := eng.Alloc(2*block, engine.Host)
		if err != nil {
			return err
		}
		defer tmp.Free()
		a, b := hbm.Slice(0, block), hbm.Slice(37*block, block) // blocks 0 and 1
		if err := eng.CopySync(ctx, tmp.Slice(0, block), a); err != nil {
			return err
		}
		if err := eng.CopySync(ctx, tmp.Slice(block, block), b); err != nil {
			return err
		}
		if err := eng.CopySync(ctx, a, tmp.Slice(block, block)); err != nil {
			return err
		}
		return eng.CopySync(ctx, b, tmp.Slice(0, block))
	}
	err := run(&bytes.Buffer{}, emulated(), swap)
	require.Error(t, err)
	require.Contains(t, err.Error(), "block 0 byte")
}
